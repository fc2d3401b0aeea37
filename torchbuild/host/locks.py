"""Locks between torchbuild processes (two publishers of one channel, two runs in one working directory).

A lock is a file whose lock (flock on POSIX, LockFileEx on Windows, by filelock) the holder keeps while it works. The
kernel releases it when the holder ends, however it ends (a kill -9 or a cancelled CI job included), so a lock is
never stale and nothing ever has to break one. The file itself stays (removing a lock file while another process
waits on it would let two processes hold it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from torchbuild.errors import UserError
from torchbuild.host.console import console
from torchbuild.host.files import umask

POLL_S = 0.1


class Busy(UserError):
    """Another process holds the lock (and waiting was not asked for, or lasted too long)."""


@contextlib.contextmanager
def held(path: Path, *, busy: str, wait_s: float = 0.0, waiting: str = "") -> Iterator[None]:
    """Hold the lock ``path`` for the ``with`` block. When another process holds it: wait up to ``wait_s`` seconds
    (saying ``waiting`` once), then raise Busy with ``busy``. A lock file that cannot be made or opened (a read-only
    or full disk, a folder without write permission) raises UserError naming it."""
    lock = filelock.FileLock(path, mode=0o666 & ~umask(), thread_local=False)
    try:
        if not _acquire(lock, 0):
            if waiting:
                console.print(f"  {waiting} (lock {path})", highlight=False)
            started = time.monotonic()
            if not _acquire(lock, wait_s):
                raise Busy(f"{busy} (after {time.monotonic() - started:.0f} s; lock {path})")
    except OSError as exc:
        raise UserError(f"cannot make or open the lock file {path}: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        lock.release()


def _acquire(lock: filelock.FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout, poll_interval=POLL_S)
    except filelock.Timeout:
        return False
    return True
