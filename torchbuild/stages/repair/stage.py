"""repair: make the wheel self-contained for its platform tag, then prove it with a static import-closure check.

linux-64: auditwheel (with patchelf) vendors what the wheel needs beyond the manylinux policy of the Plan's tag and
sets that tag. What must never be vendored is excluded (see ``auditwheel_excludes``). When auditwheel's analysis
finds nothing to vendor and the wheel already carries the Plan's name, the wheel is copied through: running
auditwheel's repair on a 1 GB archive only to get the same bytes back costs minutes. The closure check runs on the
result either way.

win-64: delvewheel vendors what the wheel's own import tables need and what is loaded by name at run time (derived in
windows.py beside this module, with the name-mangling policy), from the Plan's DLL providers, keeping torch's own DLLs
as they are. The PE import-closure check (platforms/windows/pe.py) then proves every .dll/.pyd resolves each import,
that what is loaded by name is there, and that every VC runtime DLL serves the binaries' MSVC. Every DLL taken from a
provider must carry its vendor's valid Authenticode signature (windows.signer_of).

Both: one OpenMP runtime per process, counted with what the declared requirements' libraries (kept or vendored)
import and load by name in turn, read from their pinned wheels (stages/requirement_libraries.py); upstream's own
wheel of a release recorded with more than one (companions.yaml upstream_openmp) passes with exactly that set, said
in the message. The result gets the SBOM of what was vendored (<dist-info>/sboms/torchbuild.cdx.json,
wheel/sbom.py) and is written in a deterministic form dated the cell's epoch (wheel/rewrite.py,
wheel/provenance.py), without recompressing a member; auditwheel and delvewheel run with SOURCE_DATE_EPOCH set to
it. The same inputs give the same bytes.

Reads ``built_wheel`` and ``source_info``; writes ``repaired_wheel`` (named ``plan.wheel``) and ``repair_report``
(``repair.json``: what was vendored, from where, signed by whom, and the VC runtime floor the binaries set;
torchbuild/wheel/repair_report.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from torchbuild.config import cuda_wheels
from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import archives
from torchbuild.host.proc import ToolError, run_tool
from torchbuild.platforms.closure import ClosureReport, left_to_dependencies, with_hints
from torchbuild.platforms.closure import F as B
from torchbuild.platforms.linux import elf, manylinux
from torchbuild.platforms.target import RepairTool
from torchbuild.platforms.windows import pe
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context, Stage, companion_artifacts, package_artifact, requirement_libraries
from torchbuild.stages.repair import dependent_elf, dependent_pe, windows
from torchbuild.stages.repair.auditwheel_run import Analysis, analyse, auditwheel_excludes, auditwheel_repair
from torchbuild.stages.repair.finish import RepairBeside, finish_wheel
from torchbuild.wheel import path_budget
from torchbuild.wheel.provenance import ENV as EPOCH_ENV
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import Floor, RepairReport, Vendored
from torchbuild.wheel.rewrite import dist_info_of
from torchbuild.wheel.wheelfile import WheelError, with_requirements, without_requirements

if TYPE_CHECKING:
    from torchbuild.plan import Plan

NAME = "repair"
REPORT = "repair.json"
DELVEWHEEL_TIMEOUT_S = 3600


def run(ctx: Context) -> StageResult:
    repair = REPAIRERS[ctx.plan.platform_module.repair_tool]
    wheel = ctx.inputs.get("built_wheel")
    if wheel is None:
        raise StageFailed(NAME, "no wheel from the build stage (its output 'built_wheel' is missing)")
    return _with_dependents(ctx, repair(ctx, wheel.path))


def _with_dependents(ctx: Context, root: StageResult) -> StageResult:
    """``root`` (torch's repair) with the repair of every other package the cell ships whose wheel the source stage
    fetched, beside torch's repaired wheel (each links against it: ``ShippedPackage.links_against``)."""
    dependents = [p for p in ctx.plan.dependents if package_artifact("source_wheel", p) in ctx.inputs]
    if not dependents:
        return root
    repair_beside = DEPENDENT_REPAIRERS[ctx.plan.platform_module.repair_tool](ctx, root.outputs["repaired_wheel"].path)
    outputs, checks, said = dict(root.outputs), list(root.checks), []
    for package in dependents:
        made, more, line = repair_beside(package, ctx.inputs[package_artifact("source_wheel", package)].path)
        outputs.update(made)
        checks += more
        said.append(line)
    message = "; ".join([root.message, *said])
    return dataclasses.replace(root, outputs=outputs, checks=tuple(checks), message=message)


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


# --- linux-64 --------------------------------------------------------------------------------------------


def _repair_linux(ctx: Context, wheel: Path) -> StageResult:
    plan = ctx.plan
    tag = plan.wheel_tags.platform
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / plan.wheel

    beside, hint = cuda_wheels.site_packages_libraries(plan.declared_libraries), _hint(plan)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix="elf-members-") as kept:
        closure = elf.check_wheel(wheel, tag, scratch=out_dir, keep_in=Path(kept), provided=beside)
        fast = manylinux.verdict(wheel, tag, closure, out_dir, Path(kept)) if wheel.name == plan.wheel else None
    if fast is not None and fast.compliant:
        _, added, _ = finish(ctx, wheel, target, [])
        how = (
            f"already {tag}, nothing to vendor ({fast.reason}; {time.monotonic() - started:.0f} s, auditwheel's "
            "full analysis not needed); copied through (SBOM added)"
        )
        grafted: list[Vendored] = []
    else:
        how, analysis, made = _auditwheel(ctx, wheel, tag, out_dir / "auditwheel" / target.name, fast)
        grafted = _grafted(wheel, made, analysis) if made != wheel else []
        _, added, _ = finish(ctx, made, target, grafted)
        shutil.rmtree(out_dir / "auditwheel", ignore_errors=True)
        closure = elf.check_wheel(target, tag, scratch=out_dir, provided=beside)

    closure = _follow_requirements(ctx, with_hints(closure, hint))
    checks = closure.checks()
    problems = [_gap(m.file, m.needed, hint(m.needed)) for m in closure.missing] + [b.reason for b in closure.bad]
    problems += [p for p in (closure.openmp_problem(),) if p]  # two OpenMP runtimes in one process
    if problems:
        raise StageFailed(
            NAME,
            f"import closure of {target} is broken ({len(problems)} problems): "
            + "; ".join(problems[:10])
            + (" ..." if len(problems) > 10 else ""),
            checks,
        )
    _write_report(ctx, target, grafted)
    left = left_to_dependencies(closure)
    how += (f"; left to the declared requirements: {left}" if left else "") + said_added(added, plan)
    return StageResult(outputs=_outputs(ctx, target), checks=checks, message=f"{how}; closure: {closure.summary()}")


def _follow_requirements(ctx: Context, closure: ClosureReport[B]) -> ClosureReport[B]:
    """The closure whose OpenMP count follows what the declared requirements' libraries import and load in turn
    (read from their pinned wheels), passing upstream's recorded set where the wheel is upstream's own."""
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    return requirement_libraries.follow(closure, ctx.plan, source_of(ctx), ctx.options.cache_dir, log, NAME)


def _hint(plan: Plan) -> Callable[[str], str]:
    """What a missing library's report adds: the declared requirement that should have provided it."""
    return lambda name: cuda_wheels.should_have_provided(name, plan.declared_libraries)


def _gap(file: str, needed: str, hint: str) -> str:
    return f"{file} needs {needed}" + (f" ({hint})" if hint else "")


def _auditwheel(
    ctx: Context, wheel: Path, tag: str, target: Path, fast: manylinux.Verdict | None
) -> tuple[str, Analysis, Path]:
    """auditwheel's analysis, and its repair (into ``target``) where it finds something to do; returns what it did,
    the analysis and the wheel to finish from."""
    excludes = auditwheel_excludes(wheel, cuda_wheels.provided_libraries(ctx.plan.declared_libraries))
    started = time.monotonic()
    analysis = analyse(wheel, tag, excludes)
    analysed_s = time.monotonic() - started
    if analysis.unlocated:
        raise StageFailed(
            NAME,
            f"{wheel} needs {', '.join(analysis.unlocated)}, which is neither in the wheel nor allowed by {tag}, "
            "and auditwheel cannot find it on this machine to vendor it (add its directory to LD_LIBRARY_PATH, "
            "or ship it in the wheel)",
        )
    if not analysis.eligible:
        raise StageFailed(
            NAME,
            f"{wheel} cannot be {tag}: auditwheel finds it consistent with {analysis.consistent_with} at best "
            "(versioned symbols from a newer glibc/libstdc++, or newer ISA extensions). Build it in the manylinux "
            "image of the Plan's tag.",
        )
    why = f" ({fast.reason})" if fast is not None else " (the wheel's name is not the Plan's)"
    if not analysis.graft and wheel.name == ctx.plan.wheel:
        how = f"auditwheel{why}: nothing to vendor, already {tag} ({analysed_s:.0f} s analysis)"
        how += "; copied through (SBOM added)"
        return how, analysis, wheel
    auditwheel_repair(wheel, tag, excludes, target, ctx.stage_dir("logs") / f"{NAME}.log", tool_env(ctx))
    vendored = ", ".join(analysis.graft) or "nothing"
    how = f"auditwheel repair to {tag}{why}: vendored {vendored} ({time.monotonic() - started:.0f} s)"
    return how, analysis, target


def _grafted(wheel: Path, target: Path, analysis: Analysis) -> list[Vendored]:
    """The libraries auditwheel put into the repaired wheel (renamed libfoo-<hash>.so.1), and where they came from."""
    with archives.open_zip(wheel) as archive:
        before = set(archive.namelist())
    found = []
    with archives.open_zip(target) as archive:
        for info in archive.infolist():
            if info.filename in before or not elf.SHARED_OBJECT.search(info.filename):
                continue
            base = Path(info.filename).name
            soname = next((n for n in analysis.graft if base.split("-")[0] == n.split(".so")[0]), base)
            data = archive.read(info)
            found.append(
                Vendored(
                    path=info.filename,
                    sha256=hashlib.sha256(data).hexdigest(),
                    size=len(data),
                    version=None,
                    provider="system",
                    origin=analysis.found_at.get(soname, soname),
                )
            )
    return found


# --- win-64 ----------------------------------------------------------------------------------------------


def _repair_windows(ctx: Context, wheel: Path) -> StageResult:
    plan = ctx.plan
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / plan.wheel
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    machine = pe.TAG_MACHINES.get(plan.wheel_tags.platform, "AMD64")
    started = time.monotonic()
    from_requirements = windows.requirement_dlls(plan, ctx.options.cache_dir, log)
    found = windows.needs(plan, wheel, ctx.options.cache_dir, log, from_requirements=from_requirements)
    located = found.located
    located_s = time.monotonic() - started

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="delvewheel-", dir=out_dir) as tmp:
        argv = windows.delvewheel_argv(
            wheel,
            Path(tmp),
            sorted({hit.path.parent for hit in located}),
            sorted({hit.name for hit in located}),
            [*windows.facts_of(plan).driver_dlls, *cuda_wheels.provided_libraries(plan.declared_libraries)],
        )
        with as_stage_failure(NAME, ToolError):
            run_tool(argv, log=log, env=tool_env(ctx), timeout=DELVEWHEEL_TIMEOUT_S, what="delvewheel repair")
        made = sorted(Path(tmp).glob("*.whl"))
        if [p.name for p in made] != [wheel.name]:
            got = ", ".join(p.name for p in made) or "no wheel"
            raise StageFailed(NAME, f"delvewheel repair of {wheel} made {got}; expected {wheel.name}")
        vendored = windows.vendored(made[0], located, found.signers)
        dropped, added, shortened = finish(ctx, made[0], target, vendored, drop=vendored_requirements(plan))
    repaired_s = time.monotonic() - started

    started = time.monotonic()
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    report = pe.check_wheel(target, python=plan.python, machine=machine, provided=provided)
    report = _follow_requirements(ctx, with_hints(report, _hint(plan)))
    checks = [*report.checks(), *windows.runtime_checks(target, plan, found.runtime_loaded, found.floor)]
    failed = [c for c in checks if c.status == "failed" and c.code != "P100"]
    if failed:
        target.unlink()
        raise StageFailed(
            NAME,
            f"the repaired {target.name} is not self-contained ({len(failed)} problems): "
            + "; ".join(c.message for c in failed[:8])
            + (" ..." if len(failed) > 8 else ""),
            checks,
        )
    _write_report(ctx, target, vendored, found.floor, found.runtime_loaded)
    names = ", ".join(f"{hit.name} ({hit.origin})" for hit in located) or "nothing"
    floor = f"; VC runtime floor MSVC {found.floor.version} ({found.floor.set_by})" if found.floor else ""
    if left := left_to_dependencies(report):
        floor += f"; left to the declared requirements: {left}"
    if dropped:
        floor += f"; vendored the declared requirements' DLLs ({plan.declared_choice.said}), Requires-Dist dropped: "
        floor += "; ".join(dropped)
    floor += said_added(added, plan)
    if shortened:
        first, short = next(iter(shortened.items()))
        floor += (f"; {len(shortened)} license file(s) renamed shorter to fit MAX_PATH under the roots pip installs "
                  f"into (the folders between as a hash, METADATA's License-File too): {first} -> {short}")  # fmt: skip
    message = (
        f"delvewheel --ignore-existing --no-mangle-all: vendored {names} into {target.name} "
        f"(providers {located_s:.1f} s, delvewheel {repaired_s:.0f} s){floor}; closure checked in "
        f"{time.monotonic() - started:.0f} s: {report.summary()}"
    )
    return StageResult(outputs=_outputs(ctx, target), checks=tuple(checks), message=message)


def _write_report(
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


def _outputs(ctx: Context, target: Path) -> dict[str, Artifact]:
    return {"repaired_wheel": Artifact.of(target), "repair_report": Artifact.of(ctx.stage_dir(NAME) / REPORT)}


# --- platforms -------------------------------------------------------------------------------------------

# The cell's Platform (platforms/target.py) names its repairer; this stage runs it.

# Each repairer of the packages that link against torch: given torch's repaired wheel, what repairs one of them
DEPENDENT_REPAIRERS: Mapping[RepairTool, Callable[[Context, Path], RepairBeside]] = {
    "auditwheel": dependent_elf.repairer,
    "delvewheel": dependent_pe.repairer,
}
REPAIRERS: Mapping[RepairTool, Callable[[Context, Path], StageResult]] = {
    "auditwheel": _repair_linux,
    "delvewheel": _repair_windows,
}


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("built_wheel", "source_info", *companion_artifacts("source_wheel")),
    writes=("repaired_wheel", "repair_report", *companion_artifacts("repaired_wheel", "repair_report")),
)
