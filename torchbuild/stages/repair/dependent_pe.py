"""The repair of a package the Plan builds beside torch (``ShippedPackage.links_against``; win-64 torchvision,
torchaudio) from PyPI's wheel, beside torch's repaired wheel, on PE binaries (ELF: dependent_elf.py).

- Its binaries import torch's own DLLs (c10.dll, torch_cpu.dll): they resolve against torch's repaired wheel, which
  is installed beside it, and are never vendored: delvewheel gets ``--exclude`` with every DLL name torch's wheel
  holds outside the VC runtime.
- The VC runtime is vendored as for torch (windows.py: the same providers and signatures, ``<name>.libs/``, no name
  mangling), at least as new as the floor its own binaries set: a companion linked by a newer MSVC than torch must
  not run on torch's older copy.
- The DLLs its extension modules import that it loads only where installed (torchaudio's FFmpeg DLLs, companions.yaml
  ``on_demand``) are neither vendored nor missing: the closure names them as loaded on demand; any other DLL that
  nothing provides still fails the stage.
- The DLLs its wheel bundles itself (torchvision: libpng16.dll, jpeg8.dll, libwebp.dll, zlib.dll ...) stay as they
  are and are listed: in the stage's message, the repair report and the SBOM, as bundled by the upstream wheel.

The result keeps PyPI's file name, gets its SBOM and is written in the deterministic form dated its own wheel's
time, as torch's. Writes ``repaired_wheel[<name>]`` and ``repair_report[<name>]`` (``repair-<name>.json``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import archives
from torchbuild.host.proc import ToolError, run_tool
from torchbuild.knowledge import dll_providers
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.platforms.windows import pe, vc_runtime
from torchbuild.results import Artifact, Check
from torchbuild.stages import Context, dependent_source
from torchbuild.stages.repair import windows
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
TIMEOUT_S = 600


def torch_dlls(repaired_torch: Path) -> dict[str, str]:
    """The DLL names torch's repaired wheel holds (lower case) -> where, less the VC runtime (each wheel brings its
    own, at its own floor)."""
    with archives.open_zip(repaired_torch) as archive:
        names = [n for n in archive.namelist() if n.lower().endswith(".dll")]
    return {
        PurePosixPath(n).name.lower(): f"torch's {repaired_torch.name} ({n})"
        for n in names
        if not vc_runtime.is_vc_runtime(PurePosixPath(n).name)
    }


def _bundled(wheel: Path, shipped: ShippedPackage) -> list[Vendored]:
    """The DLLs the companion's own wheel ships (not its extensions), as SBOM rows."""
    rows = []
    with archives.open_zip(wheel) as archive:
        for info in archive.infolist():
            if not info.filename.lower().endswith(".dll") or info.filename.split("/", 1)[0].endswith(".libs"):
                continue
            data = archive.read(info)
            rows.append(bundled_row(shipped, info.filename, data, pe.file_version(data, info.filename)))
    return rows


def _check_torch_serves(plan: Plan, shipped: ShippedPackage, wheel: Path, beside: Mapping[str, str]) -> None:
    """Refuse a companion that imports a DLL neither its wheel, torch's repaired wheel, the system nor a
    redistributable provides: the cell's torch cannot serve it (another build, or not torch at all)."""
    before = pe.check_wheel(wheel, python=plan.python, provided=beside, on_demand=shipped.on_demand_dlls)
    redistributable = windows.facts_of(plan).redistributable_dlls
    lacking = sorted({m.needed.lower() for m in before.missing if not dll_providers.matches(m.needed, redistributable)})
    if lacking:
        importers = sorted({m.file for m in before.missing if m.needed.lower() in lacking})
        raise StageFailed(
            NAME,
            f"{wheel.name} ({shipped.name} {shipped.release}) imports {', '.join(lacking)} (from "
            f"{', '.join(importers[:4])}), which torch's repaired wheel does not hold: this cell's torch cannot serve "
            f"it. Pass the torch build it pairs with, or leave {shipped.name} out (--packages torch)",
        )


def repairer(ctx: Context, torch: Path) -> RepairBeside:
    """What repairs each package that links against ``torch`` (the repaired wheel), with what it needs of torch's
    wheel read once."""
    beside = torch_dlls(torch)
    return lambda shipped, wheel: repair(ctx, shipped, wheel, beside)


def repair(
    ctx: Context, shipped: ShippedPackage, wheel: Path, beside: Mapping[str, str]
) -> tuple[dict[str, Artifact], list[Check], str]:
    """One companion wheel repaired beside torch's: its outputs, checks and one line for the stage's message."""
    plan = ctx.plan
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / wheel.name
    log = ctx.stage_dir("logs") / f"{NAME}-{shipped.name}.log"
    source = dependent_source(ctx.inputs, shipped, wheel)
    _check_torch_serves(plan, shipped, wheel, beside)
    on_demand = shipped.on_demand_dlls
    found = windows.needs(plan, wheel, ctx.options.cache_dir, log, beside=beside, on_demand=on_demand)
    libs = f"{shipped.name}.libs"
    with tempfile.TemporaryDirectory(prefix="delvewheel-", dir=out_dir) as tmp:
        argv = windows.delvewheel_argv(
            wheel,
            Path(tmp),
            sorted({hit.path.parent for hit in found.located}),
            sorted({hit.name for hit in found.located}),
            [*windows.facts_of(plan).driver_dlls, *beside, *on_demand],
        )
        what = f"delvewheel repair of {wheel.name}"
        with as_stage_failure(NAME, ToolError):
            run_tool(argv, log=log, env={EPOCH_ENV: str(source.epoch)}, timeout=TIMEOUT_S, what=what)
        made = sorted(Path(tmp).glob("*.whl"))
        if [p.name for p in made] != [wheel.name]:
            got = ", ".join(p.name for p in made) or "no wheel"
            raise StageFailed(NAME, f"{what} made {got}; expected {wheel.name}")
        vendored = windows.vendored(made[0], found.located, found.signers, libs_dir=libs)
        bundled = _bundled(made[0], shipped)
        finish_wheel(made[0], target, [*vendored, *bundled], source)

    machine = pe.TAG_MACHINES.get(plan.wheel_tags.platform, "AMD64")
    # delvewheel's patch of its __init__.py adds <name>.libs; torch's __init__.py adds torch/lib and torch.libs
    searched = ["torch/lib", "torch.libs", libs]
    report = pe.check_wheel(
        target, python=plan.python, machine=machine, search_dirs=searched, provided=beside, on_demand=on_demand
    )
    checks = [*report.checks(), *windows.runtime_checks(target, plan, (), found.floor)]
    repair_report = RepairReport(
        wheel=target.name, platform=plan.platform, vendored=(*vendored, *bundled), vc_runtime_floor=found.floor
    )
    outputs = package_outputs(shipped, target, checks, repair_report, "is not self-contained beside torch")
    took = ", ".join(PurePosixPath(v.path).name for v in vendored) or "nothing"
    floor = f"VC runtime floor MSVC {found.floor.version} ({found.floor.set_by})" if found.floor else "no VC floor"
    line = (
        f"{target.name}: vendored {took} into {libs}; {len(beside)} DLLs of torch's wheel left to torch; bundled by "
        f"{bundled_by(shipped)}: {', '.join(PurePosixPath(b.path).name for b in bundled) or 'none'}"
        f"; {floor}; closure: {report.summary()}"
    )
    return outputs, checks, line
