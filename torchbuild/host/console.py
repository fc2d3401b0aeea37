"""Terminal output: progress and errors on stderr (rich), results on stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.markup import escape

from torchbuild.results import Artifact, Check, timings

# A CI log is no terminal: rich would wrap at 80 columns there; paths and sha256s read better unwrapped.
console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
out = Console(highlight=False, soft_wrap=True)


MARKS = {"passed": "[green]✓[/]", "skipped": "[yellow]-[/]", "cached": "[cyan]↺[/]", "failed": "[red]✗[/]",
         "unverified": "[yellow]?[/]"}  # fmt: skip


def _github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


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
