"""Terminal output: progress and errors on stderr (rich), results on stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from rich.console import Console

from torchbuild.plan import Plan
from torchbuild.stages import Artifact

# A CI log is no terminal: rich would wrap at 80 columns there; paths and sha256s read better unwrapped.
console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)
out = Console(highlight=False, soft_wrap=True)


def print_plan(plan: Plan) -> None:
    """Key: value lines (not a table): readable in a narrow terminal and in a CI log alike."""
    rows = [
        ("torch", f"{plan.torch} (asked: {plan.torch_requested}), wheel version {plan.version}"),
        ("platform", plan.platform),
        ("python", plan.python),
        ("cuda", plan.cuda),
        ("cudnn", str(plan.cudnn) if plan.cudnn is not None else "-"),
        ("compiler", _toolchain_line(plan)),
        ("generator", plan.toolchain.generator),
        ("build", f"{plan.build_kind}, build number {plan.build_number}, timeout {plan.build_timeout_hours:g} h"),
        ("build deps", ", ".join(f"{d.name} ({d.filename})" for d in plan.build_deps) or "-"),
        ("ships DLLs", ", ".join(plan.ship_dlls) or "-"),
        ("wheel", plan.wheel),
        ("conda", f"{plan.conda.filename} (build number {plan.conda.build_number})"),
        ("depends", ", ".join(plan.conda.depends)),
        ("constrains", ", ".join(plan.conda.constrains) or "-"),
        ("channel", plan.channel),
        ("work dir", plan.work_dir),
        *((f"env {k}", v) for k, v in plan.env.items()),
        *(("note", n) for n in plan.notes),
    ]
    width = max(len(key) for key, _ in rows)
    out.print(f"[bold]plan {plan.cell_id}[/]")
    for key, value in rows:
        out.print(f"  {key:<{width}}  {value}")
    out.print()


def _toolchain_line(plan: Plan) -> str:
    tc = plan.toolchain
    if tc.compiler == "msvc":
        line = f"MSVC {tc.msvc_toolset} (Visual Studio {tc.visual_studio}; vcvarsall.bat {' '.join(tc.vcvarsall_args)})"
        if tc.nvcc:
            line += f", nvcc {tc.nvcc} accepts MSVC {tc.msvc_accepted}"
        return line
    if tc.nvcc:
        return f"gcc {tc.gcc_accepted} (what nvcc {tc.nvcc} accepts)"
    return "gcc"


MARKS = {"passed": "[green]✓[/]", "skipped": "[yellow]-[/]", "cached": "[cyan]↺[/]", "failed": "[red]✗[/]"}


def _github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def step_start(stage: str) -> None:
    if _github_actions():
        print(f"::group::{stage}", flush=True)
    console.print(f"[bold]▶ {stage}[/] ...")


def step_done(
    stage: str, status: str, seconds: float, message: str = "", outputs: Mapping[str, Artifact] | None = None
) -> None:
    if _github_actions() and status != "cached":
        print("::endgroup::", flush=True)
    mark = MARKS.get(status, "?")
    first, _, rest = message.partition("\n")
    console.print(f"{mark} {stage:<8} {status:<8} {seconds:7.1f}s  {first}")
    if rest:
        console.print(rest)
    for name, artifact in (outputs or {}).items():
        console.print(f"    {name}: {artifact.path} ({artifact.size / 1e6:.1f} MB, sha256 {artifact.sha256[:16]}…)")
