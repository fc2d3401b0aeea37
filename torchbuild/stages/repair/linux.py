"""torch's repair on linux-64: auditwheel (with patchelf) vendors what the wheel needs beyond the manylinux policy of
the Plan's tag and sets that tag; what must never be vendored is excluded (``auditwheel_excludes``). When the fast
verdict or auditwheel's analysis finds nothing to vendor and the wheel already carries the Plan's name, the wheel is
copied through. The ELF import-closure check runs on the result either way (stage.py says the whole stage)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from torchbuild.errors import StageFailed
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import ShippedPackage
from torchbuild.platforms.closure import left_to_dependencies, with_hints
from torchbuild.platforms.linux import elf, manylinux
from torchbuild.results import StageResult
from torchbuild.stages import Context
from torchbuild.stages.repair.auditwheel_run import Analysis, analyse, auditwheel_excludes, auditwheel_repair
from torchbuild.stages.repair.auditwheel_run import grafted as grafted_by_auditwheel
from torchbuild.stages.repair.finish import NAME
from torchbuild.stages.repair.torch_wheel import (
    finish,
    follow_requirements,
    hint_of,
    outputs,
    said_added,
    tool_env,
    write_report,
)
from torchbuild.wheel.repair_report import Vendored


def repair(ctx: Context, torch: ShippedPackage, wheel: Path) -> StageResult:
    plan = ctx.plan
    tag = plan.wheel_tags.platform
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / torch.wheel

    beside, hint = cuda_wheels.site_packages_libraries(plan.declared_libraries), hint_of(plan)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix="elf-members-") as kept:
        closure = elf.check_wheel(wheel, tag, scratch=out_dir, keep_in=Path(kept), provided=beside)
        fast = manylinux.verdict(wheel, tag, closure, out_dir, Path(kept)) if wheel.name == torch.wheel else None
    if fast is not None and fast.compliant:
        _, added, _ = finish(ctx, wheel, target, [])
        how = (
            f"already {tag}, nothing to vendor ({fast.reason}; {time.monotonic() - started:.0f} s, auditwheel's "
            "full analysis not needed); copied through (SBOM added)"
        )
        grafted: list[Vendored] = []
    else:
        how, analysis, made = _auditwheel(ctx, wheel, tag, out_dir / "auditwheel" / target.name, fast)
        grafted = grafted_by_auditwheel(wheel, made, analysis) if made != wheel else []
        _, added, _ = finish(ctx, made, target, grafted)
        shutil.rmtree(out_dir / "auditwheel", ignore_errors=True)
        closure = elf.check_wheel(target, tag, scratch=out_dir, provided=beside)

    closure = follow_requirements(ctx, with_hints(closure, hint))
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
    write_report(ctx, target, grafted)
    left = left_to_dependencies(closure)
    how += (f"; left to the declared requirements: {left}" if left else "") + said_added(added, plan)
    return StageResult(outputs=outputs(ctx, target), checks=checks, message=f"{how}; closure: {closure.summary()}")


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
    if not analysis.graft and wheel.name == target.name:
        how = f"auditwheel{why}: nothing to vendor, already {tag} ({analysed_s:.0f} s analysis)"
        how += "; copied through (SBOM added)"
        return how, analysis, wheel
    auditwheel_repair(wheel, tag, excludes, target, ctx.stage_dir("logs") / f"{NAME}.log", tool_env(ctx))
    vendored = ", ".join(analysis.graft) or "nothing"
    how = f"auditwheel repair to {tag}{why}: vendored {vendored} ({time.monotonic() - started:.0f} s)"
    return how, analysis, target
