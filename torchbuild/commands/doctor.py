"""``python pipeline.py doctor [--cuda X --py Y]``: every requirement of the selected cells' compile on this host,
found or missing, each missing one with its fix. It finds things the way the build does (activate.py) but
changes nothing: no CUDA is provisioned and no dependency downloaded (it says when a run would do that).

A run that compiles (torch from a checkout, or a package beside it from its checkout) asks the same first
(``refuse_missing``): a cell this host cannot compile is refused before anything runs, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.host.console import out
from torchbuild.plan import Plan
from torchbuild.platforms.toolchain import Requirement, describe_missing
from torchbuild.stages.build.activate import discover

MARKS = {"found": "[green]✓[/]", "missing": "[red]✗[/]", "optional, missing": "[yellow]-[/]"}


def dependency_requirements(plan: Plan, cache_dir: Path) -> list[Requirement]:
    rows = []
    for dep in plan.build_deps:
        cached = cache_dir / "deps" / dep.sha256 / ".complete"
        where = (
            f"cached in {cached.parent}"
            if cached.is_file()
            else f"a run downloads {dep.url} (sha256 {dep.sha256[:12]}…)"
        )
        rows.append(Requirement(f"dependency {dep.name}", True, where))
    return rows


def requirements(plan: Plan, cache_dir: Path, environ: Mapping[str, str] | None = None) -> list[Requirement]:
    env = dict(os.environ if environ is None else environ)
    found = discover(plan, cache_dir, env, provision_cuda=False)
    rows = list(found.requirements)
    if len(rows) > 1:  # the host can build this platform at all
        rows += dependency_requirements(plan, cache_dir)
        git = shutil.which("git", path=env.get("PATH"))
        rows.append(Requirement("git (for --git-ref)", git is not None, git or "not on PATH", "install git", False))
    rows += [Requirement("note", True, note) for note in found.notes]
    return rows


def refuse_missing(plans: Sequence[Plan], compiled: Sequence[str], cache_dir: Path) -> None:
    """The cells of ``plans``, which compile ``compiled`` from a checkout (torch, a package beside it), checked as
    doctor checks them: UserError naming the first cell this host cannot compile and what it lacks."""
    if not compiled:
        return
    for plan in plans:
        missing = [r for r in requirements(plan, cache_dir) if r.required and not r.found]
        if missing:
            raise UserError(
                f"{plan.cell_id} compiles {' and '.join(compiled)} from a checkout, and this host cannot compile it; "
                f"missing:\n{describe_missing(missing)}\nNothing was run. `python pipeline.py doctor --platform "
                f"{plan.platform} --cuda {plan.cuda} --py {plan.python}` lists every requirement; run the cell where "
                "they are."
            )


def report(plans: Sequence[Plan], cache_dir: Path, environ: Mapping[str, str] | None = None) -> int:
    """Print each cell's requirements; 0 when every cell can be compiled here, else 1."""
    ok = True
    for plan in plans:
        rows = requirements(plan, cache_dir, environ)
        missing = [r for r in rows if r.required and not r.found]
        ok = ok and not missing
        verdict = "[green]ready to compile[/]" if not missing else f"[red]{len(missing)} missing[/]"
        out.print(f"[bold]{plan.cell_id}[/]  torch {plan.version}  ({verdict})")
        width = max(len(r.name) for r in rows)
        for r in rows:
            out.print(f"  {MARKS[r.status]} {r.name:<{width}}  {r.detail}", highlight=False)
            if not r.found and r.fix:
                out.print(f"    {'':<{width}}  fix: {r.fix}", highlight=False)
        out.print()
    return 0 if ok else 1
