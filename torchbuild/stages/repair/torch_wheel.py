"""What torch's repair does on either platform (linux.py: auditwheel; stage.py: delvewheel) before and after its
repair tool: where the wheel came from, the Requires-Dist it finishes with, the OpenMP count that follows the declared
requirements, and its report (``repair.json``) and outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from torchbuild.errors import StageFailed
from torchbuild.host import archives
from torchbuild.knowledge import cuda_wheels
from torchbuild.platforms.closure import ClosureReport
from torchbuild.platforms.closure import F as B
from torchbuild.results import Artifact
from torchbuild.stages import Context, requirement_libraries
from torchbuild.stages.repair.finish import NAME, finish_wheel
from torchbuild.wheel import path_budget
from torchbuild.wheel.provenance import ENV as EPOCH_ENV
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import Floor, RepairReport, Vendored
from torchbuild.wheel.rewrite import dist_info_of
from torchbuild.wheel.wheelfile import WheelError, with_requirements, without_requirements

if TYPE_CHECKING:
    from torchbuild.plan import Plan

REPORT = "repair.json"


def source_of(ctx: Context) -> SourceInfo:
    info = ctx.inputs.get("source_info")
    if info is None:
        raise StageFailed(NAME, "no source_info from the source stage: where the wheel came from is not known")
    return SourceInfo.read(info.path)


def finish(
    ctx: Context, made: Path, target: Path, vendored: Sequence[Vendored], drop: Sequence[str] = ()
) -> tuple[list[str], list[str], dict[str, str]]:
    """``made`` as ``target``: with the SBOM of what was vendored added (<dist-info>/sboms/, PEP 770), without the
    Requires-Dist of ``drop`` (the requirements whose libraries it vendored), with those of the requirements that
    provide the libraries it leaves to them where it lacks them (a compiled wheel whose setup.py ignored the build
    environment's) and of those torch imports without declaring them, and in the deterministic form dated the cell's
    epoch, so that the same inputs give the same bytes; a Windows wheel's license files that would not fit MAX_PATH
    under the roots pip installs into renamed shorter (path_budget.license_renames).
    Returns the Requires-Dist lines dropped, those added, and the license files renamed."""
    with archives.open_zip(made) as archive:
        member = f"{dist_info_of(archive)}/METADATA"
        metadata = archive.read(member)
        renames = path_budget.license_renames(made.name, archive.namelist(), ctx.plan.python)
    text, dropped = without_requirements(metadata, drop) if drop else (metadata, [])
    missing = set(drop) - {canonicalize_name(Requirement(line).name) for line in dropped}
    if missing:
        raise StageFailed(NAME, f"{made.name} declares no {', '.join(sorted(missing))} to drop from Requires-Dist")
    try:
        text, added = with_requirements(text, [*declared_requirements(ctx.plan), *undeclared_requirements(ctx.plan)])
    except WheelError as exc:
        raise StageFailed(NAME, f"{made.name}: {exc}") from None
    text = path_budget.with_license_files_renamed(text, renames) if renames else text
    files = {member: text} if text != metadata else {}
    finish_wheel(made, target, vendored, source_of(ctx), ctx.plan.declared_libraries, files=files, renames=renames)
    return dropped, added, renames


def declared_requirements(plan: Plan) -> list[str]:
    """torch's Requires-Dist lines (the release record's, verbatim) that bring the libraries the cell leaves to
    them."""
    return list(dict.fromkeys(w.requirement for w in plan.declared_libraries))


def undeclared_requirements(plan: Plan) -> list[str]:
    """The Requires-Dist lines of what torch imports without declaring it (packaging.yaml undeclared_requirements)."""
    return [rule.value for rule in plan.added_requirements]


def said_added(added: Sequence[str], plan: Plan) -> str:
    """The lines added, those of the declared libraries without their markers (those are as recorded), those torch
    lacks with the reason: the wheel lacked them."""
    undeclared = [rule for rule in plan.added_requirements if rule.value in added]
    libraries = [line for line in added if line not in {rule.value for rule in undeclared}]
    said = ""
    if libraries:
        said += f"; Requires-Dist added ({len(libraries)}, markers as in {cuda_wheels.PINNED_IN}): " + "; ".join(
            line.split(";")[0].strip() for line in libraries
        )
    for rule in undeclared:
        said += f"; Requires-Dist added: {rule.value}, which torch {plan.torch} imports undeclared ({rule.why})"
    return said


def vendored_requirements(plan: Plan) -> list[str]:
    """The wheel's requirements whose libraries the cell vendors (canonical names; mkl, not what mkl requires)."""
    names = (canonicalize_name(Requirement(w.requirement.split(";")[0]).name) for w in plan.vendored_libraries)
    return list(dict.fromkeys(names))


def tool_env(ctx: Context) -> dict[str, str]:
    """What auditwheel and delvewheel run with: the epoch, which also keeps delvewheel's command line (with this
    machine's paths) out of the wheel."""
    return {EPOCH_ENV: str(source_of(ctx).epoch)}


def follow_requirements(ctx: Context, closure: ClosureReport[B]) -> ClosureReport[B]:
    """The closure whose OpenMP count follows what the declared requirements' libraries import and load in turn
    (read from their pinned wheels), passing upstream's recorded set where the wheel is upstream's own."""
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    return requirement_libraries.follow(closure, ctx.plan, source_of(ctx), ctx.options.cache_dir, log, NAME)


def hint_of(plan: Plan) -> Callable[[str], str]:
    """What a missing library's report adds: the declared requirement that should have provided it."""
    return lambda name: cuda_wheels.should_have_provided(name, plan.declared_libraries)


def write_report(
    ctx: Context,
    target: Path,
    vendored: Sequence[Vendored],
    floor: Floor | None = None,
    runtime_loaded: Sequence[str] = (),
) -> None:
    RepairReport(
        wheel=target.name,
        platform=ctx.plan.platform,
        vendored=tuple(vendored),
        vc_runtime_floor=floor,
        runtime_loaded=tuple(runtime_loaded),
    ).write(ctx.stage_dir(NAME) / REPORT)


def outputs(ctx: Context, target: Path) -> dict[str, Artifact]:
    return {"repaired_wheel": Artifact.of(target), "repair_report": Artifact.of(ctx.stage_dir(NAME) / REPORT)}
