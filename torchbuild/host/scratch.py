"""Scratch space for files a stage writes only to read back and delete (the conda stage's unpacked payload, the
conda prefix smoke-conda makes): in memory where the host has a RAM-backed ``/dev/shm`` with room for them, on disk
beside the stage's output otherwise.

Why: creating thousands of small files costs a disk file system far more kernel time than memory does, and a torch
wheel unpacks to more than ten thousand (docs/status.md has the measured difference).
``TORCHBUILD_SCRATCH=disk`` keeps scratch on disk.

Memory is shared by every process on the host and outlives a killed one, so each directory in memory is locked by
the process that made it (flock on the directory itself, released by the kernel however the process ends): what no
live process holds was left by a run that was killed (SIGKILL, a cancelled CI job, a power cut) and is removed by
``remove_leftovers`` when a run starts; an interrupted run (SIGINT, SIGTERM, SIGHUP) removes its own at once
(``remove_own``). A directory kept on purpose (a failed smoke environment, for debugging) names the record that
keeps it (``keep_while``); it stays while that record names it, and goes with the first run after the record is
gone (its build directory deleted, or the stage run again).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from torchbuild.config import environment
from torchbuild.errors import UserError

RAM_DIR = Path("/dev/shm")
MARGIN = 2 << 30  # bytes of memory left to everything else
SETTING = environment.SCRATCH
CHOICES = environment.SCRATCH_CHOICES  # auto: in memory where there is room
MARK = ".torchbuild-"  # beside each directory in memory: "<MARK><its name>", holding the record that keeps it
LEGACY = "torchbuild-smoke-"  # directories in memory that earlier versions made without a mark
# An unmarked directory may belong to an earlier version's run that is still going (it takes no lock): only one
# untouched this long is taken for a leftover.
LEGACY_AGE = 24 * 3600

_owned: dict[Path, int] = {}  # directories in memory this process made -> the descriptor holding their lock
_owned_lock = threading.Lock()
_stopping = False  # set by remove_own: the process is ending
_removed_on_stop: list[Path] = []  # what remove_own removed: a stage thread still running may write there again


def _mounted_as_tmpfs(path: Path, mounts: Path = Path("/proc/mounts")) -> bool:
    try:
        lines = mounts.read_text(encoding="utf-8").splitlines()
    except OSError:
        return False  # not Linux
    return any(fields[1:3] == [str(path), "tmpfs"] for fields in (line.split() for line in lines) if len(fields) > 2)


def _available_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    try:
        for line in meminfo.read_text(encoding="utf-8").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def in_memory(size: int, ram: Path = RAM_DIR) -> Path | None:
    """``ram`` when it is a tmpfs with room for ``size`` bytes, in its own free space and in the memory the host
    has available, beyond ``MARGIN``; else None."""
    if environment.scratch_setting() == "disk" or not _mounted_as_tmpfs(ram):
        return None
    try:
        free = shutil.disk_usage(ram).free
    except OSError:
        return None
    return ram if min(free, _available_memory()) >= size + MARGIN else None


def make_in_memory(size: int, prefix: str, keep_while: Path | None = None) -> Path | None:
    """A fresh, empty directory in memory for ``size`` bytes where there is room (see ``in_memory``), else None;
    locked by this process until ``remove``. ``keep_while``: a record file; the directory survives this process
    (for debugging) while that file names it."""
    ram = in_memory(size)
    if ram is None:
        return None
    while True:
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=ram))
        descriptor = _lock(path)
        if descriptor is not None:
            break  # else a run starting meanwhile took the new, unmarked directory for a leftover: make another
    with _owned_lock:
        stopping = _stopping
        if not stopping:
            _owned[path] = descriptor
    if stopping:  # a stage thread still running after remove_own: its scratch would outlive the process
        shutil.rmtree(path, ignore_errors=True)
        os.close(descriptor)
        raise Stopping("the run is being stopped: no new scratch")
    _mark(path).write_text(f"{keep_while or ''}\n", encoding="utf-8")
    return path


class Stopping(UserError):
    """Scratch asked for after the process began to stop (by a stage thread that has not yet ended)."""


def _mark(path: Path) -> Path:
    return path.with_name(MARK + path.name)


def _lock(path: Path) -> int | None:
    """A descriptor holding ``path``'s lock; None when another process holds it, or it is gone."""
    import fcntl  # /dev/shm is Linux's: no memory scratch elsewhere

    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    if not path.is_dir():  # removed between the open and the lock
        os.close(descriptor)
        return None
    return descriptor


def remove(path: Path) -> None:
    """Remove a scratch directory (and its mark, and release its lock, when this process holds it)."""
    shutil.rmtree(path, ignore_errors=True)
    _mark(path).unlink(missing_ok=True)
    with _owned_lock:
        descriptor = _owned.pop(path, None)
    if descriptor is not None:
        os.close(descriptor)


def remove_own() -> list[Path]:
    """Remove every directory in memory this process made and still has (an interrupted run), and refuse new ones
    from then on (the stage threads still running); returns them."""
    global _stopping
    with _owned_lock:
        _stopping = True
        paths = list(_owned)
    for path in paths:
        remove(path)
    _removed_on_stop.extend(paths)
    return paths


def _remove_again_at_exit() -> None:
    """A stage thread still running when the process began to stop (py-rattler's installer runs in this process)
    can create its directory again after remove_own removed it, and then keep it as a failed stage's environment.
    The interpreter joins those threads before it calls the atexit functions, so this runs after them."""
    for path in _removed_on_stop:
        shutil.rmtree(path, ignore_errors=True)
        _mark(path).unlink(missing_ok=True)


atexit.register(_remove_again_at_exit)


def _kept(path: Path) -> bool:
    """A record names ``path`` as the directory it keeps (see ``make_in_memory``)."""
    try:
        record = _mark(path).read_text(encoding="utf-8").strip()
        return bool(record) and Path(record).read_text(encoding="utf-8").strip() == str(path)
    except (OSError, UnicodeDecodeError):
        return False


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


def remove_leftovers(ram: Path = RAM_DIR) -> list[Path]:
    """Remove the directories in memory that earlier runs left (their process is gone, and no record keeps them);
    returns them. Directories of live processes, on this host or in other working directories, are left alone."""
    if sys.platform != "linux" or not ram.is_dir():
        return []
    removed = []
    marked = {ram / mark.name.removeprefix(MARK) for mark in ram.glob(MARK + "*")}
    legacy = {p for p in ram.glob(LEGACY + "*") if p not in marked and _older_than(p, LEGACY_AGE)}
    for path in sorted(marked | legacy):
        if path in _owned:
            continue
        if not path.exists():
            _mark(path).unlink(missing_ok=True)
            continue
        descriptor = _lock(path)
        if descriptor is None:
            continue  # a live process's
        try:
            if not _kept(path):
                shutil.rmtree(path, ignore_errors=True)
                _mark(path).unlink(missing_ok=True)
                removed.append(path)
        finally:
            os.close(descriptor)
    return removed


@contextlib.contextmanager
def directory(size: int, on_disk: Path, prefix: str) -> Iterator[Path]:
    """A fresh, empty directory for ``size`` bytes of transient files: in memory where there is room (see
    ``in_memory``), else under ``on_disk`` (where one an earlier, killed run left with the same ``prefix`` is
    removed first: a stage directory is only ever used by one run). Removed on exit."""
    path = make_in_memory(size, prefix)
    if path is None:
        on_disk.mkdir(parents=True, exist_ok=True)
        for earlier in on_disk.glob(prefix + "*"):
            if earlier.is_dir():
                shutil.rmtree(earlier, ignore_errors=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=on_disk))
    try:
        yield path
    finally:
        remove(path)


def in_memory_path(path: Path, ram: Path = RAM_DIR) -> bool:
    """Whether ``path`` is scratch space in memory (for messages)."""
    return path.is_relative_to(ram)
