"""Runs a long build: every line of its output into ``build.log`` as it comes, a live progress line (elapsed time
and the last compile step), a timeout, and on failure the first error line, the last lines and the log's path.

A three-hour compile that fails must be legible from the CI log alone: the first error is what broke, the last
lines are where it stopped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from torchbuild.host import signals
from torchbuild.host.win_jobs import Job, JobError

TAIL_LINES = 30
HEARTBEAT_S = 60.0  # off a terminal (CI), a progress line at most this often

# Lines that say what broke, most specific first; the first line matching any of them is "the error".
ERROR_PATTERNS = [
    re.compile(p)
    for p in (
        r"\berror C\d{4}\b",  # MSVC compiler: foo.cpp(12): error C2065: ...
        r"\b(fatal )?error LNK\d{4}\b",  # MSVC linker, e.g. LNK1161
        r"\bfatal error C\d{4}\b",
        r"\(\d+\): (fatal )?error\b",  # nvcc / cudafe: foo.cu(12): error: ...
        r":\d+(:\d+)?: (fatal )?error\b",  # gcc / clang: foo.cpp:3:5: error: ...
        r"\bnvcc fatal\b",
        r"^CMake Error\b",
        r"undefined reference to\b",
        r"\bld(\.\w+)?: (error|cannot find)\b",
        r"^error: ",  # setuptools / pip: "error: command 'gcc' failed"
        r"^ERROR: ",
        r"^FAILED: ",  # ninja: the step that failed (after the compiler's own message, when it printed one)
        r"Traceback \(most recent call last\)",
    )
]
# Progress markers: ninja's "[12/345] Building CXX object ...", make's "[ 45%] Building ...".
_STEP = re.compile(r"^\s*(\[\s*\d+/\d+\]|\[\s*\d+%\])\s+(.*)$")


@dataclass(frozen=True)
class BuildOutcome:
    returncode: int | None  # None: killed by the timeout
    seconds: float
    log: Path
    error_line: str | None  # first line that names an error
    tail: tuple[str, ...]
    last_step: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def failure_message(self, what: str, timeout_s: float | None) -> str:
        if self.returncode is None:
            head = f"{what} timed out after {_clock(timeout_s or 0)} (the Plan's build timeout)"
        else:
            head = f"{what} failed (exit {self.returncode}) after {_clock(self.seconds)}"
        lines = [head + "."]
        if self.error_line:
            lines.append(f"First error: {self.error_line}")
        if self.last_step:
            lines.append(f"Last step: {self.last_step}")
        lines.append(f"Last {len(self.tail)} lines:")
        lines.extend(f"  | {line}" for line in self.tail)
        lines.append(f"Full log: {self.log}")
        return "\n".join(lines)


def first_error(lines: Iterable[str]) -> str | None:
    """The first line matching the most specific pattern that matches anything (a compiler's own message beats
    ninja's FAILED line and pip's summary, which come later and say less)."""
    kept = [line.rstrip() for line in lines]
    for pattern in ERROR_PATTERNS:
        for line in kept:
            if pattern.search(line):
                return line.strip()
    return None


def step_of(line: str) -> str | None:
    match = _STEP.match(line)
    return f"{match.group(1)} {match.group(2)}".strip() if match else None


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """One line: on a terminal rewritten in place; elsewhere (CI) printed when the step changes, at most once per
    ``HEARTBEAT_S``, so a log of hours stays readable."""

    def __init__(self, label: str, stream: TextIO | None = None, interactive: bool | None = None) -> None:
        self.label = label
        self.stream: TextIO = stream or sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.started = time.monotonic()
        self.last_print = 0.0
        self.step = ""

    def line(self) -> str:
        return f"{self.label} {_clock(time.monotonic() - self.started)}  {(self.step or '(starting)')[:160]}"

    def update(self, step: str | None) -> None:
        if step:
            self.step = step
        now = time.monotonic()
        if self.interactive:
            if now - self.last_print >= 0.2:
                self._write("\r\x1b[2K" + self.line()[:200])
                self.last_print = now
        elif step and now - self.last_print >= HEARTBEAT_S:
            self._write(self.line() + "\n")
            self.last_print = now

    def done(self) -> None:
        if self.interactive:
            self._write("\r\x1b[2K")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def run_build(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    timeout_s: float | None,
    label: str = "build",
    progress: Progress | None = None,
    on_line: Callable[[str], None] | None = None,
) -> BuildOutcome:
    """Run ``argv`` with exactly ``env``; append its combined output to ``log`` line by line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [os.fspath(a) for a in argv]
    progress = progress or Progress(label)
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    error: str | None = None
    started = time.monotonic()
    with log.open("a", encoding="utf-8", errors="replace") as handle:
        handle.write(f"$ {subprocess.list2cmdline(command)}\n  (in {cwd})\n")
        handle.flush()
        job = _new_job()
        proc = signals.start(  # its whole tree dies with us (orphans.py); _kill_tree stops it earlier
            command,
            windows_job=job,
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
        )
        killed = threading.Event()

        def on_timeout() -> None:
            killed.set()
            _kill_tree(proc, job)

        timer = threading.Timer(timeout_s, on_timeout) if timeout_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                handle.write(line + "\n")
                tail.append(line)
                if error is None:
                    error = first_error([line])
                progress.update(step_of(line))
                if on_line is not None:
                    on_line(line)
            code = proc.wait()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the compilers must not go on without us
            _kill_tree(proc, job)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if job is not None:
                job.close()
            progress.done()
        timed_out = killed.is_set()
        handle.write(f"[{'timed out' if timed_out else f'exit {code}'} after {_clock(time.monotonic() - started)}]\n")
    lines = list(tail)
    specific = first_error_in_log(log) if code != 0 else None
    return BuildOutcome(
        returncode=None if timed_out else code,
        seconds=time.monotonic() - started,
        log=log,
        error_line=specific or error,
        tail=tuple(lines),
        last_step=progress.step,
    )


def first_error_in_log(log: Path, last_command_only: bool = True) -> str | None:
    """The error line of the last command in ``log`` (the log is appended to across commands)."""
    text = log.read_text(encoding="utf-8", errors="replace")
    if last_command_only and "\n$ " in text:
        text = text[text.rfind("\n$ ") :]
    return first_error(text.splitlines())


def _new_job() -> Job | None:
    """On Windows, a job for the build and what it starts, inside the run's (None elsewhere, or where Windows
    refuses one)."""
    if os.name != "nt":
        return None
    try:
        return Job.new()
    except JobError:
        return None


def _kill_tree(proc: subprocess.Popen[str], job: Job | None) -> None:
    """Stop the build and every compiler it started (a bare kill would leave ninja's children running)."""
    if os.name == "nt":
        if job is not None and job.terminate():
            return
        if proc.poll() is not None:
            return
        stopped = signals.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
        if stopped.returncode != 0:  # no taskkill, or one without /T (Wine 8.0's): at least the build itself
            proc.kill()
        return
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
