"""Scratch space for files a stage writes only to read back and delete (the conda stage's unpacked payload, the
conda prefix smoke-conda makes): in memory where the host has a RAM-backed ``/dev/shm`` with room for them, on disk
beside the stage's output otherwise.

Why: creating thousands of small files costs a disk file system far more kernel time than memory does, and a torch
wheel unpacks to more than ten thousand (the README's benchmark section has the measured difference).
``TORCHBUILD_SCRATCH=disk`` keeps scratch on disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from torchbuild.errors import UserError, one_of

RAM_DIR = Path("/dev/shm")
MARGIN = 2 << 30  # bytes of memory left to everything else
SETTING = "TORCHBUILD_SCRATCH"
CHOICES = ("auto", "disk")  # auto: in memory where there is room


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
    setting = os.environ.get(SETTING, "auto").lower()
    if setting not in CHOICES:
        raise UserError(f"{SETTING}={os.environ[SETTING]!r} is not a scratch setting: use {one_of(CHOICES)}.")
    if setting == "disk" or not _mounted_as_tmpfs(ram):
        return None
    try:
        free = shutil.disk_usage(ram).free
    except OSError:
        return None
    return ram if min(free, _available_memory()) >= size + MARGIN else None


def make_in_memory(size: int, prefix: str) -> Path | None:
    """A fresh, empty directory in memory for ``size`` bytes where there is room (see ``in_memory``), else None.
    The caller removes it."""
    ram = in_memory(size)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=ram)) if ram is not None else None


@contextlib.contextmanager
def directory(size: int, on_disk: Path, prefix: str) -> Iterator[Path]:
    """A fresh, empty directory for ``size`` bytes of transient files: in memory where there is room (see
    ``in_memory``), else under ``on_disk``. Removed on exit."""
    path = make_in_memory(size, prefix)
    if path is None:
        on_disk.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=on_disk))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def in_memory_path(path: Path, ram: Path = RAM_DIR) -> bool:
    """Whether ``path`` is scratch space in memory (for messages)."""
    return path.is_relative_to(ram)
