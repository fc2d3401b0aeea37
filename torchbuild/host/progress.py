"""What each running stage is doing, said as it goes: a line per step (``doing``) and, while a stage runs long, a
line a minute with what it is doing and for how long (``heartbeat``), so that a CI log and a terminal show life
during a smoke of minutes. Diagnostics: on stderr, with the rest of the progress."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from rich.markup import escape

from torchbuild.host.console import console

INTERVAL_S = 60.0

_lock = threading.Lock()
_running: dict[str, tuple[float, str]] = {}  # stage -> (when it started, what it is doing now)


def started(stage: str) -> None:
    with _lock:
        _running[stage] = (time.monotonic(), "")


def ended(stage: str) -> None:
    with _lock:
        _running.pop(stage, None)


def doing(stage: str, what: str) -> None:
    """``stage`` now does ``what``: said at once, and by the heartbeat while it lasts."""
    with _lock:
        since = _running.get(stage, (time.monotonic(), ""))[0]
        _running[stage] = (since, what)
    console.print(f"  {stage}: {escape(what)} ...", highlight=False)


def lines(now: float, every: float = INTERVAL_S) -> list[str]:
    """The heartbeat's lines at ``now``: each stage running for ``every`` seconds or more, what it does, how long."""
    with _lock:
        running = dict(_running)
    said = []
    for stage, (since, what) in sorted(running.items()):
        elapsed = now - since
        if elapsed >= every:
            minutes, seconds = divmod(int(elapsed), 60)
            said.append(f"  {stage}: {what or 'running'} ({minutes}m{seconds:02d}s so far)")
    return said


@contextlib.contextmanager
def heartbeat(every: float = INTERVAL_S) -> Iterator[None]:
    """While the block runs, every ``every`` seconds: a line for each stage running that long."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            for line in lines(time.monotonic(), every):
                console.print(escape(line), highlight=False)

    thread = threading.Thread(target=beat, name="torchbuild-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)
