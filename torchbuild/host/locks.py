"""Locks between torchbuild processes (two publishers of one channel, two runs in one working directory).

A lock is a file whose lock (flock on POSIX, LockFileEx on Windows, by filelock) the holder keeps while it works. The
kernel releases it when the holder ends, however it ends (a kill -9 or a cancelled CI job included), so a lock is
never stale and nothing ever has to break one. Children do not inherit it (Python's descriptors are not inherited)
and die with the holder (host/orphans.py), so none writes on after it is released. The file itself stays (removing a
lock file while another process waits on it would let two processes hold it).
"""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import filelock

from torchbuild.errors import UserError
from torchbuild.host.console import console
from torchbuild.host.files import umask

POLL_S = 0.1
MACHINE_FAULTS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO}
T = TypeVar("T")
_until_exit: list[filelock.FileLock] = []  # locks an interrupted process keeps while its stage threads end


class Busy(UserError):
    """Another process holds the lock (and waiting was not asked for, or lasted too long)."""


@contextlib.contextmanager
def held(path: Path, *, busy: str, wait_s: float = 0.0, waiting: str = "") -> Iterator[None]:
    """Hold the lock ``path`` for the ``with`` block (an interrupt keeps it until the process ends). When another
    process holds it: wait up to ``wait_s`` seconds (saying ``waiting`` once), then raise Busy with ``busy``. A lock
    file that cannot be made or opened (a read-only or full disk, a folder without write permission) raises
    UserError naming it."""
    lock = filelock.FileLock(path, mode=0o666 & ~umask(), thread_local=False)
    try:
        if not _acquire(lock, 0):
            if wait_s <= 0:
                raise Busy(f"{busy} (lock {path})")
            if waiting:
                console.print(f"  {waiting} (lock {path})", highlight=False)
            started = time.monotonic()
            if not _acquire(lock, wait_s):
                raise Busy(f"{busy} (waited {time.monotonic() - started:.0f} s; lock {path})")
    except OSError as exc:
        error = UserError(f"cannot make or open the lock file {path}: {exc.strerror or exc}")
        if exc.errno in MACHINE_FAULTS:
            error.exit_code = 1  # the machine's fault, not the input's (as every other OSError: commands/cli.py)
        raise error from None
    try:
        yield
    except KeyboardInterrupt:
        # The process is ending, but stage threads may still be writing below what the lock guards: the kernel
        # releases it when the process is gone.
        _until_exit.append(lock)
        raise
    except BaseException:
        lock.release()
        raise
    lock.release()


def made_once(path: Path, done: Callable[[], bool], make: Callable[[], T], *, busy: str, wait_s: float) -> T | None:
    """``make()`` unless ``done()``, by one process or stage thread at a time (the lock ``path``): one that waited
    finds it done and makes nothing. What ``make`` returned, or None where it was done already. For a cache entry that
    is replaced whole: replacing it while another reads it would take its files away."""
    if done():
        return None
    with held(path, busy=busy, wait_s=wait_s):
        return None if done() else make()


def _acquire(lock: filelock.FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout, poll_interval=POLL_S)
    except filelock.Timeout:
        return False
    return True
