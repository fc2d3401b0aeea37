"""The repair of a package the Plan builds beside torch (``ShippedPackage.links_against``; linux-64 CUDA cells'
torchvision, torchaudio) from PyPI's wheel, beside torch's repaired wheel, on ELF binaries (PE: dependent_pe.py).

- Its extension modules need torch's own libraries (libc10.so, libtorch_cuda.so, libtorch_python.so) and the CUDA
  runtime (libcudart.so.12) without a search path that reaches them: they load because ``import torch`` (which the
  package does first) has loaded libraries of those SONAMEs already. The closure check resolves them exactly so:
  torch's libraries against torch's repaired wheel, the CUDA libraries against the declared requirements of torch's
  wheel (nvidia-cuda-runtime-cu12 ...). A library that neither the companion, torch, a declared requirement nor the
  manylinux policy provides fails the stage, naming it and its importer.
- auditwheel analyses it with all of those excluded, so that it never vendors torch's libraries or a second copy
  of a declared requirement's; what auditwheel still grafts is vendored and listed. PyPI's wheels are already
  manylinux_2_28 with nothing to graft: they are copied through (SBOM added), as torch's is.
- The libraries its wheel bundles itself (torchvision.libs: libnvjpeg, libpng16, libjpeg, libwebp, libz, its own
  libcudart copy) stay as they are and are listed: in the stage's message, the repair report and the SBOM.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from torchbuild.errors import StageFailed
from torchbuild.host import archives
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import ShippedPackage
from torchbuild.platforms.linux import elf
from torchbuild.results import Artifact, Check
from torchbuild.stages import Context, dependent_source
from torchbuild.stages.repair.auditwheel_run import analyse, auditwheel_repair
from torchbuild.stages.repair.auditwheel_run import grafted as grafted_by_auditwheel
from torchbuild.stages.repair.finish import (
    RepairBeside,
    bundled_by,
    bundled_row,
    finish_wheel,
    package_outputs,
)
from torchbuild.wheel.provenance import ENV as EPOCH_ENV
from torchbuild.wheel.repair_report import RepairReport, Vendored

NAME = "repair"


def torch_libraries(repaired_torch: Path) -> dict[str, str]:
    """Each shared library torch's repaired wheel holds (file name) -> where: what ``import torch`` puts in the
    process before a companion's extensions load."""
    with archives.open_zip(repaired_torch) as archive:
        names = [n for n in archive.namelist() if elf.SHARED_OBJECT.search(n)]
    return {PurePosixPath(n).name: f"{n} in torch's {repaired_torch.name}" for n in names}


def loaded_first(repaired_torch: Path, declared: tuple[cuda_wheels.RequirementWheel, ...]) -> dict[str, str]:
    """What a companion's extensions find in the process once torch is imported: torch's libraries and those of
    torch's declared requirements (found through torch's RPATH), by library name -> where it comes from."""
    found = {
        PurePosixPath(path).name: f"{path}, installed by {who} (torch's declared requirement)"
        for path, who in cuda_wheels.site_packages_libraries(declared).items()
    }
    return {**found, **torch_libraries(repaired_torch)}


def _bundled(wheel: Path, shipped: ShippedPackage) -> list[Vendored]:
    """The shared libraries the companion's own wheel ships in <name>.libs (auditwheel's grafts upstream)."""
    rows = []
    with archives.open_zip(wheel) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(f"{shipped.name}.libs/") or not elf.SHARED_OBJECT.search(info.filename):
                continue
            rows.append(bundled_row(shipped, info.filename, archive.read(info)))
    return rows


def repairer(ctx: Context, torch: Path) -> RepairBeside:
    """What repairs each package that links against ``torch`` (the repaired wheel), with what it needs of torch's
    wheel read once."""
    beside = loaded_first(torch, ctx.plan.declared_libraries)
    return lambda shipped, wheel: repair(ctx, shipped, wheel, beside)


def repair(
    ctx: Context, shipped: ShippedPackage, wheel: Path, loaded: Mapping[str, str]
) -> tuple[dict[str, Artifact], list[Check], str]:
    """One companion wheel repaired beside torch's (``loaded``: ``loaded_first``): its outputs, checks and one line
    for the stage's message."""
    plan = ctx.plan
    tag = plan.wheel_tags.platform
    out_dir = ctx.stage_dir(NAME)
    log = ctx.stage_dir("logs") / f"{NAME}-{shipped.name}.log"
    source = dependent_source(ctx.inputs, shipped, wheel)
    before = elf.check_wheel(wheel, tag, scratch=out_dir, loaded=loaded)
    if before.missing:
        gaps = "; ".join(m.message for m in before.missing[:6])
        raise StageFailed(
            NAME,
            f"{wheel.name} ({shipped.name} {shipped.release}) needs libraries that neither it, torch's repaired "
            f"wheel nor torch's declared requirements provide: {gaps}. This cell's torch cannot serve it: pass the "
            f"torch build it pairs with, or leave {shipped.name} out (--packages torch)",
        )
    excludes = {**elf.DRIVER_LIBRARIES, **{name: f"loaded first: {where}" for name, where in loaded.items()}}
    with archives.open_zip(wheel) as archive:
        for member in archive.namelist():
            if elf.SHARED_OBJECT.search(member):
                excludes.setdefault(PurePosixPath(member).name, f"shipped in the wheel as {member}")
    analysis = analyse(wheel, tag, excludes)
    newer = ""
    if shipped.build is not None and not analysis.eligible and not analysis.unlocated:
        # Compiled on this host: tagged for what its symbols need (torch's wheel, of an older policy, serves it).
        newer = (f"; compiled on this host, its symbols need {analysis.consistent_with}, newer than torch's {tag} "
                 f"(compiled in the {tag} image, it would be {tag})")  # fmt: skip
        tag = analysis.consistent_with
        analysis = analyse(wheel, tag, excludes)
    target = out_dir / (wheel.name if shipped.build is None else f"{wheel.name.rsplit('-', 1)[0]}-{tag}.whl")
    if analysis.unlocated or not analysis.eligible:
        why = (f"needs {', '.join(analysis.unlocated)}, which nothing provides" if analysis.unlocated
               else f"is at best {analysis.consistent_with}")  # fmt: skip
        raise StageFailed(NAME, f"{wheel.name} cannot be {tag}: auditwheel finds it {why}")
    with tempfile.TemporaryDirectory(prefix="auditwheel-", dir=out_dir) as tmp:
        if analysis.graft or target.name != wheel.name:
            made = Path(tmp) / target.name
            auditwheel_repair(wheel, tag, excludes, made, log, {EPOCH_ENV: str(source.epoch)})
            grafted = grafted_by_auditwheel(wheel, made, analysis)
            how = f"auditwheel repair to {tag}: grafted {', '.join(analysis.graft) or 'nothing'}{newer}"
        else:
            made, grafted = wheel, []
            how = f"auditwheel: already {tag}, nothing to graft (copied through, SBOM added)"
        bundled = _bundled(made, shipped)
        finish_wheel(made, target, [*grafted, *bundled], source)
    report = elf.check_wheel(target, tag, scratch=out_dir, loaded=loaded)
    checks = list(report.checks())
    repair_report = RepairReport(wheel=target.name, platform=plan.platform, vendored=(*grafted, *bundled))
    outputs = package_outputs(shipped, target, checks, repair_report, "does not resolve beside torch")
    from_torch = sorted({r.needed for r in report.resolved if r.via == "loaded" and "in torch's" in r.target})
    from_requirements = sorted({r.needed for r in report.resolved if r.via == "loaded"} - set(from_torch))
    line = (
        f"{target.name}: {how}; left to torch: {', '.join(from_torch) or 'nothing'}; left to torch's declared "
        f"requirements: {', '.join(from_requirements) or 'nothing'}; bundled by {bundled_by(shipped)}: "
        f"{', '.join(PurePosixPath(b.path).name for b in bundled) or 'none'}; closure: {report.summary()}"
    )
    return outputs, checks, line
