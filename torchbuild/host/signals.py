"""Being stopped: SIGTERM (a cancelled CI job, ``kill``) and SIGHUP (a closed terminal) are handled as SIGINT (Ctrl-C)
is, by raising KeyboardInterrupt in the main thread, so that the same cleanup runs for each: scratch removed, the
child processes registered with ``child`` ended, no temporary file under a final name, the finished stages kept
(commands/cli.py says so). A second signal while that cleanup runs ends the process at once, after removing this
process's scratch in memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from torchbuild.host import orphans, scratch

HANDLED = ("SIGINT", "SIGTERM", "SIGHUP")
received: list[int] = []  # the signals this process was stopped by, in order
_children: set[subprocess.Popen[Any]] = set()
_children_lock = threading.Lock()


def _stop(signum: int, frame: FrameType | None) -> None:
    received.append(signum)
    if len(received) > 1:
        end_children()
        scratch.remove_own()
        os._exit(128 + signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def child(proc: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """A child process that is ended (``end_children``) when this process is stopped while it runs; a child of a
    stage thread, which the signal does not reach."""
    with _children_lock:
        _children.add(proc)
    try:
        with proc:
            yield proc
    finally:
        with _children_lock:
            _children.discard(proc)


def start(argv: Sequence[str | os.PathLike[str]], **options: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen``, the child ending with this process however it ends, with everything it starts
    (orphans.py; its ``on_death`` and ``windows_job`` too). Use it as ``with child(start(...)) as proc`` so that a
    stopped run ends it."""
    return orphans.start(argv, **options)


def run(
    argv: Sequence[str | os.PathLike[str]],
    timeout: float | None = None,
    input_text: str | bytes | None = None,
    **options: Any,
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run (``input_text``: its ``input``), with the child and what it started ended on a timeout,
    when this process is stopped (also where a stage thread started it), or killed (orphans.py). ``check`` and
    ``capture_output`` as subprocess.run's."""
    check = options.pop("check", False)
    if options.pop("capture_output", False):
        options.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input_text is not None and "stdin" not in options:
        options["stdin"] = subprocess.PIPE
    with child(start(argv, **options)) as proc:
        try:
            stdout, stderr = proc.communicate(input_text, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            orphans.end(proc)
            exc.output, exc.stderr = proc.communicate()
            raise
        except BaseException:
            orphans.end(proc)
            raise
    args = [os.fspath(a) for a in argv]
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, args, stdout, stderr)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def end_children() -> None:
    with _children_lock:
        running = list(_children)
    for proc in running:
        orphans.end(proc)


@contextlib.contextmanager
def stopping_cleanly() -> Iterator[None]:
    """Within the block (in the main thread), each of HANDLED raises KeyboardInterrupt; the handlers stay after a
    signal was received (the process is ending), else the earlier ones are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received.clear()
    earlier = {}
    for name in HANDLED:
        number = getattr(signal, name, None)
        if number is not None:
            earlier[number] = signal.signal(number, _stop)
    try:
        yield
    finally:
        if not received:
            for number, handler in earlier.items():
                signal.signal(number, handler)


def stopped_by() -> tuple[str, int]:
    """The signal that stopped the process (SIGINT when none was seen: a KeyboardInterrupt raised otherwise) and
    the exit code a shell gives a process it ended (128 + its number)."""
    number = received[0] if received else signal.SIGINT
    return signal.Signals(number).name, 128 + number
