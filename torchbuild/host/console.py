"""Terminal output: progress and errors on stderr (rich), results on stdout.

Whatever the streams' encoding: on Windows a piped stdout (every CI log, ``> log.txt``) is written in the ANSI code
page (cp1252, cp936 ...), a C locale gives ASCII. ``adapt_streams`` makes each stream write a character it cannot
encode as its ASCII stand-in (STAND_INS: the marks and punctuation torchbuild prints), else escaped (``\\xeb``),
never an error."""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.rule import Rule

from torchbuild.results import Artifact, Check, timings

# What a stream that cannot encode one of these characters writes instead: chosen once, one character for a mark so
# that the columns stay where they are. docs/usage.md lists them.
STAND_INS = {
    "✓": "+", "✗": "x", "↺": "=", "▶": ">", "⚠": "!", "·": ".", "…": "...", "–": "-", "—": "-",
    "→": "->", "≥": ">=", "≤": "<=", "×": "x", "‘": "'", "’": "'", "“": '"', "”": '"',
}  # fmt: skip
ERRORS = "torchbuild-stand-in"  # the codec error handler's name (codecs.register_error)


def _stand_in(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    escaped = (STAND_INS.get(c) or c.encode("ascii", "backslashreplace").decode("ascii") for c in text)
    return "".join(escaped), error.end


codecs.register_error(ERRORS, _stand_in)


def adapt_streams(*streams: TextIO) -> None:
    """``streams`` (default: stdout and stderr) write what their encoding cannot say as its stand-in: a run never
    fails for printing. Their encoding stays the host's (the ANSI code page of a Windows CI log is what it shows)."""
    for stream in streams or (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a test's capture, a closed stream: left as it is
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors=ERRORS)


# A CI log is no terminal: rich would cut a table at 80 columns there (`linu…`) and wrap long lines; a log is read
# unwrapped, every cell id and version whole. In a terminal, a table folds what does not fit (``overflow="fold"``).
LOG_WIDTH = 1000
HEADING_WIDTH = 160
console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else LOG_WIDTH)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else LOG_WIDTH)


MARKS = {"passed": "[green]✓[/]", "skipped": "[yellow]-[/]", "cached": "[cyan]↺[/]", "failed": "[red]✗[/]",
         "unverified": "[yellow]?[/]"}  # fmt: skip


def _github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def heading(text: str) -> None:
    """A rule with ``text`` (rich markup) in it, as wide as a terminal, or a log's usual 160 columns."""
    console.print(Rule(text), width=min(console.width, HEADING_WIDTH))


def step_start(stage: str, group: bool = True) -> None:
    """``group``: opens a GitHub Actions log group (not while another stage's group is open)."""
    if _github_actions() and group:
        print(f"::group::{stage}", flush=True)
    console.print(f"[bold]▶ {stage}[/] ...")


def step_done(
    stage: str,
    status: str,
    seconds: float,
    message: str = "",
    outputs: Mapping[str, Artifact] | None = None,
    end_group: bool = True,
) -> None:
    if _github_actions() and status != "cached" and end_group:
        print("::endgroup::", flush=True)
    mark = MARKS.get(status, "?")
    first, _, rest = message.partition("\n")
    console.print(f"{mark} {stage:<11} {status:<8} {seconds:7.1f}s  {first}")
    if rest:
        console.print(rest)
    for name, artifact in (outputs or {}).items():
        size = f"{artifact.size / 1e6:.1f} MB"
        console.print(f"    {escape(name)}: {artifact.path} ({size}, sha256 {artifact.sha256[:16]}…)")


def check_times(checks: Sequence[Check]) -> None:
    """``-v``: the seconds of each timed check (a group made in one go once), slowest first."""
    for seconds, what in timings(checks):
        console.print(f"    {seconds:8.2f}s  {escape(what)}")
