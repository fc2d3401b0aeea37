"""One CPU per Wine session on a host with few CPUs: the session's wineserver and every process it starts run there.

Every request a Windows process makes to its wineserver (opening a file, mapping a DLL: 45,000 for one ``import
torch``) wakes the server and then the process again; on another CPU each wake-up costs more than the request.
Measured on this project's 2-CPU host (2026-11-28, quiet): one ``import torch`` under Wine 4.4 s pinned against 6.5 s
not, 4.4 against 5.2 CPU seconds; the smoke checks of two environments at once (two sessions) 42.3-42.9 s pinned to
one CPU each against 48.5-50.3 s not, 12 % less CPU. One session alone is slower pinned (41.8 s against 36.4 s: its
two check processes share the CPU), so a host with PIN_BELOW_CPUS or more CPUs is left to its scheduler (not measured
pinned there). Windows processes still see every CPU (Wine reports the machine's), so torch's OpenMP still runs its
threads. Sessions at once get the least used CPUs; ``taskset`` (util-linux) does the pinning, so nothing is pinned
where it is missing.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Sequence

PIN_BELOW_CPUS = 4
TASKSET = "taskset"


class Cpus:
    """The CPUs sessions are pinned to, each with the number of sessions on it now."""

    def __init__(self, usable: Sequence[int], pin: bool) -> None:
        self._sessions = dict.fromkeys(sorted(usable), 0) if pin and len(usable) < PIN_BELOW_CPUS else {}
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """The least used CPU for a new session (the lowest of a tie), or None where sessions are not pinned."""
        with self._lock:
            if not self._sessions:
                return None
            cpu = min(self._sessions, key=lambda c: (self._sessions[c], c))
            self._sessions[cpu] += 1
            return cpu

    def give(self, cpu: int | None) -> None:
        if cpu is None:
            return
        with self._lock:
            self._sessions[cpu] = max(0, self._sessions.get(cpu, 0) - 1)


def pinned(argv: Sequence[str], cpu: int | None) -> list[str]:
    """``argv`` run on ``cpu`` (and every process it starts), or as it is for None."""
    return [TASKSET, "-c", str(cpu), *argv] if cpu is not None else list(argv)


def _usable() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


HOST = Cpus(_usable(), pin=shutil.which(TASKSET) is not None)
