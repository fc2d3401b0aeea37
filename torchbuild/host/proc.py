"""Running external tools: output goes to a log file, and is shown (its tail) only when the tool fails. A tool whose
progress a user waits on (a download) may instead write to the terminal itself (``live``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild.errors import StageFailed
from torchbuild.host import signals

TAIL_LINES = 40


class ToolError(StageFailed):
    """A tool could not do its work. It names no stage (the host layer knows none): a stage that runs a tool names
    itself around the call, ``with as_stage_failure(NAME, ToolError)``; uncaught, the message stands alone."""

    def __init__(self, message: str) -> None:
        super().__init__("", message)


class ToolMissing(ToolError):
    """The tool is not on PATH."""


class ToolFailed(ToolError):
    """A tool exited non-zero or ran out of time; ``output`` is everything it printed."""

    def __init__(self, message: str, output: str, returncode: int | None) -> None:
        super().__init__(message)
        self.output = output
        self.returncode = returncode  # None: timed out


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_tool(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    log: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    what: str | None = None,
    live: bool = False,
) -> str:
    """Run ``cmd``; append its combined output to ``log``; return that output. ``live``: the tool writes to the
    terminal itself (its progress bar works) and nothing is captured: the tool must keep its own log.

    On a non-zero exit or a timeout raise ToolFailed with the last lines and the log's path; ToolMissing where the
    tool is not on PATH.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [os.fspath(c) for c in cmd]
    full_env = {**os.environ, **(env or {})}
    try:
        proc = signals.run(  # ended when the run is stopped, also where a stage thread started it
            argv,
            cwd=cwd,
            env=full_env,
            stdout=None if live else subprocess.PIPE,
            stderr=None if live else subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
        )
        returncode, output = proc.returncode, proc.stdout or ""
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else (exc.output or b"").decode(errors="replace")
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(argv)}\n{output}\n[timed out after {timeout} s]\n")
        message = f"{what or argv[0]} timed out after {timeout:.0f} s; full log: {log}"
        raise ToolFailed(message, output, None) from None
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]} not found on PATH (needed for {what or 'this stage'})") from None
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(argv)}\n{output}\n[exit {returncode}]\n")
    if returncode != 0:
        last = "\n".join(output.splitlines()[-TAIL_LINES:])
        message = f"{what or argv[0]} failed (exit {returncode}). Last lines:\n{last}\nFull log: {log}"
        raise ToolFailed(message, output, returncode)
    return output
