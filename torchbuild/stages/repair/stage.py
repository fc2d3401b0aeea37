"""repair: make the wheel self-contained for its platform tag, then prove it with a static import-closure check.

linux-64 (linux.py): auditwheel (with patchelf) vendors what the wheel needs beyond the manylinux policy of the Plan's
tag and sets that tag. What must never be vendored is excluded (auditwheel_run.py ``auditwheel_excludes``). When
auditwheel's analysis finds nothing to vendor and the wheel already carries the Plan's name, the wheel is copied
through: running auditwheel's repair on a 1 GB archive only to get the same bytes back costs minutes. The closure
check runs on the result either way.

win-64 (here): delvewheel vendors what the wheel's own import tables need and what is loaded by name at run time
(derived in windows.py beside this module, with the name-mangling policy), from the Plan's DLL providers, keeping
torch's own DLLs as they are. The PE import-closure check (platforms/windows/pe.py) then proves every .dll/.pyd resolves
each import, that what is loaded by name is there, and that every VC runtime DLL serves the binaries' MSVC. Every DLL
taken from a provider must carry its vendor's valid Authenticode signature (windows.signer_of).

Both: one OpenMP runtime per process, counted with what the declared requirements' libraries (kept or vendored)
import and load by name in turn, read from their pinned wheels (stages/requirement_libraries.py); upstream's own
wheel of a release recorded with more than one (companions.yaml upstream_openmp) passes with exactly that set, said
in the message. The result gets the SBOM of what was vendored (<dist-info>/sboms/torchbuild.cdx.json,
wheel/sbom.py) and is written in a deterministic form dated the cell's epoch (wheel/rewrite.py,
wheel/provenance.py), without recompressing a member; auditwheel and delvewheel run with SOURCE_DATE_EPOCH set to
it. The same inputs give the same bytes.

Reads ``built_wheel`` and ``source_info``; writes ``repaired_wheel`` (named ``plan.root.wheel``) and ``repair_report``
(``repair.json``: what was vendored, from where, signed by whom, and the VC runtime floor the binaries set;
torchbuild/wheel/repair_report.py).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host.proc import ToolError, run_tool
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import ShippedPackage
from torchbuild.platforms.closure import left_to_dependencies, with_hints
from torchbuild.platforms.target import RepairTool
from torchbuild.platforms.windows import pe
from torchbuild.results import Artifact, Check, StageResult
from torchbuild.stages import Context, Stage, companion_artifacts, package_artifact
from torchbuild.stages.repair import dependent_elf, dependent_pe, linux, windows
from torchbuild.stages.repair.finish import NAME, RepairBeside
from torchbuild.stages.repair.torch_wheel import (
    finish,
    follow_requirements,
    hint_of,
    outputs,
    said_added,
    tool_env,
    vendored_requirements,
    write_report,
)

DELVEWHEEL_TIMEOUT_S = 3600


def run(ctx: Context) -> StageResult:
    """Each package the cell ships, in the Plan's order: the root (torch) by the cell's repair tool, each package
    that links against it beside its repaired wheel (``ShippedPackage.links_against``). A package built beside torch
    whose wheel the source stage did not fetch is left out; torch's wheel missing fails the stage."""
    tool = ctx.plan.platform_module.repair_tool
    repaired: StageResult | None = None
    repair_beside: RepairBeside | None = None
    outputs: dict[str, Artifact] = {}
    checks: list[Check] = []
    said: list[str] = []
    for package in ctx.plan.packages:
        wheel = ctx.inputs.get(input_wheel(package))
        if wheel is None and package.is_root:
            raise StageFailed(NAME, "no wheel from the build stage (its output 'built_wheel' is missing)")
        if wheel is None:
            continue
        if package.is_root:
            repaired = REPAIRERS[tool](ctx, package, wheel.path)
            made, more, line = dict(repaired.outputs), list(repaired.checks), repaired.message
        else:
            if repair_beside is None:  # what repairs the packages beside torch, with torch's repaired wheel read once
                root = outputs[package_artifact("repaired_wheel", ctx.plan.root)].path
                repair_beside = DEPENDENT_REPAIRERS[tool](ctx, root)
            made, more, line = repair_beside(package, wheel.path)
        outputs.update(made)
        checks += more
        said.append(line)
    assert repaired is not None  # the root is the first of Plan.packages
    return dataclasses.replace(repaired, outputs=outputs, checks=tuple(checks), message="; ".join(said))


def input_wheel(package: ShippedPackage) -> str:
    """The artifact that is ``package``'s wheel: the build stage's for the root and for a package it compiles beside
    it, the source stage's (PyPI's wheel, fetched by sha256) for one taken from PyPI."""
    if package.is_root:
        return "built_wheel"
    return package_artifact("built_wheel" if package.build else "source_wheel", package)


# --- win-64 ----------------------------------------------------------------------------------------------


def _repair_windows(ctx: Context, torch: ShippedPackage, wheel: Path) -> StageResult:
    plan = ctx.plan
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / torch.wheel
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
    report = follow_requirements(ctx, with_hints(report, hint_of(plan)))
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
    write_report(ctx, target, vendored, found.floor, found.runtime_loaded)
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
    return StageResult(outputs=outputs(ctx, target), checks=tuple(checks), message=message)


# --- platforms -------------------------------------------------------------------------------------------

# The cell's Platform (platforms/target.py) names its repairer; this stage runs it.

# Each repairer of the packages that link against torch: given torch's repaired wheel, what repairs one of them
DEPENDENT_REPAIRERS: Mapping[RepairTool, Callable[[Context, Path], RepairBeside]] = {
    "auditwheel": dependent_elf.repairer,
    "delvewheel": dependent_pe.repairer,
}
# The root's (torch's) repairer, given its entry and its built wheel
REPAIRERS: Mapping[RepairTool, Callable[[Context, ShippedPackage, Path], StageResult]] = {
    "auditwheel": linux.repair,
    "delvewheel": _repair_windows,
}


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("built_wheel", "source_info", *companion_artifacts("source_wheel", "built_wheel", "source_info")),
    writes=("repaired_wheel", "repair_report", *companion_artifacts("repaired_wheel", "repair_report")),
)
