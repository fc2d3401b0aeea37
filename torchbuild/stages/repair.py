"""repair: make the wheel self-contained for its platform tag, then prove it with a static import-closure check.

linux-64: auditwheel (with patchelf) vendors what the wheel needs beyond the manylinux policy of the Plan's tag and
sets that tag. What must never be vendored is excluded (see ``auditwheel_excludes``). When auditwheel's analysis
finds nothing to vendor and the wheel already carries the Plan's name, the wheel is copied through: rewriting a
1 GB archive only to get the same bytes back costs minutes. The closure check runs on the result either way.

win-64: delvewheel vendors the DLLs the Plan says the cell ships (``plan.ship_dlls``: the VC runtime, and for CUDA
cells the CUDA runtime DLLs) from their providers (torchbuild/dll_providers.py), keeping torch's own DLLs as they are
(``--ignore-existing``) and every name unmangled (policy below). The PE import-closure check (torchbuild/pe.py) then
proves every .dll/.pyd resolves each import, and that every DLL the Plan names is in the wheel.

Reads ``built_wheel``; writes ``repaired_wheel`` (named ``plan.wheel``).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild import dll_providers, elf, pe
from torchbuild.errors import StageFailed
from torchbuild.proc import run_tool
from torchbuild.results import Artifact, Check, StageResult
from torchbuild.stages import Context, Stage

NAME = "repair"
AUDITWHEEL_TIMEOUT_S = 3600
DELVEWHEEL_TIMEOUT_S = 3600


def run(ctx: Context) -> StageResult:
    repair = REPAIRERS.get(ctx.plan.platform)
    if repair is None:
        raise StageFailed(NAME, UNSUPPORTED.get(ctx.plan.platform, f"no repair for platform {ctx.plan.platform}"))
    wheel = ctx.inputs.get("built_wheel")
    if wheel is None:
        raise StageFailed(NAME, "no wheel from the build stage (its output 'built_wheel' is missing)")
    return repair(ctx, wheel.path)


# --- linux-64 --------------------------------------------------------------------------------------------


def auditwheel_excludes(wheel: Path) -> dict[str, str]:
    """SONAME patterns auditwheel must not graft, with the reason.

    - Driver libraries (libcuda.so*, libnvidia-ml.so*): they belong to the installed NVIDIA driver.
    - Every shared library the wheel ships itself (torch/lib/libtorch_cpu.so, libc10.so, libgomp.so.1, ...): they
      are found in the wheel through $ORIGIN at run time, which the closure check below verifies. Without the
      exclude, auditwheel looks them up on the build machine for ELF files whose RUNPATH does not reach torch/lib
      (torch 2.13's torch/bin/test_shim has only $ORIGIN) and either fails ("required library libtorch.so could
      not be located") or grafts a second copy, e.g. the system's libgomp.so.1 beside torch/lib/libgomp.so.1:
      two OpenMP runtimes in one process.
    """
    excludes = dict(elf.DRIVER_LIBRARIES)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if elf.SHARED_OBJECT.search(name):
                excludes.setdefault(Path(name).name, f"shipped in the wheel as {name}")
    return excludes


@dataclass(frozen=True)
class Analysis:
    """What auditwheel's analysis says about a wheel for one target tag."""

    graft: tuple[str, ...]  # libraries it would vendor for the target
    unlocated: tuple[str, ...]  # of those, the ones not found on this machine (nothing to vendor them from)
    eligible: bool  # the wheel's symbols/ISA allow the target tag
    consistent_with: str  # the best tag auditwheel finds the wheel consistent with


def analyse(wheel: Path, platform_tag: str, excludes: Mapping[str, str]) -> Analysis:
    """auditwheel's own analysis (the one `auditwheel show` and `auditwheel repair` run), for the target tag."""
    from auditwheel import lddtree, wheel_abi
    from auditwheel.error import NonPlatformWheelError

    # auditwheel memoises the library search path (LD_LIBRARY_PATH, ld.so.conf) and each wheel's ELF data for the
    # life of the process; start from what is true now, as the `auditwheel repair` process after it will.
    for memo in (lddtree.load_ld_paths, lddtree.parse_ld_so_conf, wheel_abi.get_wheel_elfdata):
        memo.cache_clear()
    policies, wanted = elf.manylinux_policies(platform_tag)
    base = platform_tag[: -len("_" + policies.architecture.value)]
    try:
        info: Any = wheel_abi.analyze_wheel_abi(
            policies.libc,
            policies.architecture,
            wheel,
            frozenset(excludes),
            disable_isa_ext_check=False,
            allow_graft=True,
            requested_policy_base_name=base,
        )
    except NonPlatformWheelError as exc:
        raise StageFailed(NAME, f"{wheel}: {exc.message}") from None
    except (ValueError, RuntimeError, OSError) as exc:
        raise StageFailed(NAME, f"auditwheel cannot analyse {wheel}: {exc}") from None
    libs = info.external_refs[wanted.name].libs
    return Analysis(
        graft=tuple(sorted(libs)),
        unlocated=tuple(sorted(name for name, path in libs.items() if path is None)),
        eligible=not wanted > info.overall_policy,
        consistent_with=str(info.overall_policy.name),
    )


def _repair_linux(ctx: Context, wheel: Path) -> StageResult:
    plan = ctx.plan
    tag = plan.wheel_tags.platform
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / plan.wheel
    excludes = auditwheel_excludes(wheel)

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
    if not analysis.graft and wheel.name == plan.wheel:
        _copy(wheel, target)
        how = f"auditwheel: nothing to vendor, already {tag} ({analysed_s:.0f} s analysis); copied through"
    else:
        _auditwheel_repair(ctx, wheel, tag, excludes, target)
        vendored = ", ".join(analysis.graft) or "nothing"
        how = f"auditwheel repair to {tag}: vendored {vendored} ({time.monotonic() - started:.0f} s)"

    started = time.monotonic()
    report = elf.check_wheel(target, tag, scratch=out_dir)
    checks = report.checks()
    if not report.ok:
        problems = [f"{m.file} needs {m.needed}" for m in report.missing] + [b.reason for b in report.bad]
        raise StageFailed(
            NAME,
            f"import closure of {target} is broken ({len(problems)} problems): "
            + "; ".join(problems[:10])
            + (" ..." if len(problems) > 10 else ""),
        )
    closure = f"closure checked in {time.monotonic() - started:.0f} s: {report.summary()}"
    return StageResult(outputs={"repaired_wheel": Artifact.of(target)}, checks=checks, message=f"{how}; {closure}")


def _auditwheel_repair(ctx: Context, wheel: Path, tag: str, excludes: Mapping[str, str], target: Path) -> None:
    argv: list[str] = [sys.executable, "-m", "auditwheel", "repair", "--plat", tag, "--only-plat"]
    for pattern in excludes:
        argv += ["--exclude", pattern]
    with tempfile.TemporaryDirectory(prefix="auditwheel-", dir=target.parent) as tmp:
        run_tool(
            [*argv, "--wheel-dir", tmp, str(wheel)],
            stage=NAME,
            log=ctx.stage_dir("logs") / f"{NAME}.log",
            timeout=AUDITWHEEL_TIMEOUT_S,
            what="auditwheel repair",
        )
        made = sorted(Path(tmp).glob("*.whl"))
        if [p.name for p in made] != [target.name]:
            names = ", ".join(p.name for p in made) or "no wheel"
            raise StageFailed(NAME, f"auditwheel repair of {wheel} made {names}; expected {target.name}")
        shutil.move(str(made[0]), target)


def _copy(src: Path, dest: Path) -> None:
    part = dest.with_name(dest.name + ".part")
    shutil.copyfile(src, part)
    part.replace(dest)


# --- win-64 ----------------------------------------------------------------------------------------------
#
# Name-mangling policy: none (--no-mangle-all). delvewheel can rename vendored DLLs (msvcp140-<hash>.dll) and
# rewrite the import tables that name them, so that each package gets a private copy. We do not:
# - torch's own DLLs (c10.dll, torch_cpu.dll, ...) keep their names (--ignore-existing): C++ extensions built
#   against torch link c10.lib/torch_cpu.lib, whose import records name c10.dll and torch_cpu.dll;
# - the VC runtime is meant to be one per process: an extension built against torch imports MSVCP140.dll by that
#   name, and a renamed copy for torch would put two C++ runtimes in one process. The copy we ship is the newest
#   (backward compatible), and Windows reuses an already loaded DLL of the same name, so whichever loads first
#   serves all;
# - CUDA DLLs are versioned by name already (cudart64_12.dll), and CUDA extensions import them by those names.
# The cost: an older msvcp140.dll loaded into the process before torch (from another package that ships one)
# wins over ours; the smoke stage on Windows runners is what catches that.


def _in_wheel(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if n.lower().endswith((".dll", ".pyd", ".exe"))]


def _matching(pattern: str, names: Sequence[str]) -> list[str]:
    return [n for n in names if fnmatch.fnmatch(Path(n).name.lower(), pattern.lower())]


def delvewheel_argv(wheel: Path, out_dir: Path, add_path: Sequence[Path], include: Sequence[str]) -> list[str]:
    """The delvewheel command of the repair (also what bench/repair.py compares against)."""
    system = pe.load_system_set()
    argv = [sys.executable, "-m", "delvewheel", "repair", "--ignore-existing", "--no-mangle-all", "-w", str(out_dir)]
    if add_path:
        argv += ["--add-path", os.pathsep.join(str(p) for p in add_path)]
    if include:
        argv += ["--include", os.pathsep.join(include)]
    # Driver DLLs never go into a wheel, even when a provider directory happens to hold one.
    argv += ["--exclude", os.pathsep.join(sorted(system.driver))]
    return [*argv, str(wheel)]


def ship_checks(wheel_names: Sequence[str], patterns: Sequence[str]) -> list[Check]:
    """P103: every DLL the Plan says the cell ships is in the repaired wheel."""
    checks = []
    for pattern in patterns:
        found = _matching(pattern, wheel_names)
        checks.append(
            Check(
                name=f"ships {pattern}",
                status="passed" if found else "failed",
                message=", ".join(found) if found else f"{pattern} is not in the repaired wheel",
                code="P103",
            )
        )
    return checks


def _repair_windows(ctx: Context, wheel: Path) -> StageResult:
    plan = ctx.plan
    out_dir = ctx.stage_dir(NAME)
    target = out_dir / plan.wheel
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    machine = pe.TAG_MACHINES.get(plan.wheel_tags.platform, "AMD64")
    started = time.monotonic()
    present = _in_wheel(wheel)
    needed = [p for p in plan.ship_dlls if not _matching(p, present)]
    try:
        located = dll_providers.locate(
            needed, cuda=plan.cuda, cudnn=plan.cudnn, python=plan.python, cache_dir=ctx.options.cache_dir, log=log
        )
    except dll_providers.ProviderError as exc:
        raise StageFailed(NAME, f"cannot repair {wheel.name}: {exc}") from None
    located_s = time.monotonic() - started

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="delvewheel-", dir=out_dir) as tmp:
        argv = delvewheel_argv(
            wheel, Path(tmp), sorted({hit.path.parent for hit in located}), sorted({hit.name for hit in located})
        )
        run_tool(argv, stage=NAME, log=log, timeout=DELVEWHEEL_TIMEOUT_S, what="delvewheel repair")
        made = sorted(Path(tmp).glob("*.whl"))
        if [p.name for p in made] != [wheel.name]:
            got = ", ".join(p.name for p in made) or "no wheel"
            raise StageFailed(NAME, f"delvewheel repair of {wheel} made {got}; expected {wheel.name}")
        shutil.move(str(made[0]), target)
    repaired_s = time.monotonic() - started

    started = time.monotonic()
    report = pe.check_wheel(target, python=plan.python, machine=machine)
    names = _in_wheel(target)
    checks = [*report.checks(), *ship_checks(names, plan.ship_dlls)]
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
    vendored = ", ".join(f"{hit.name} ({hit.origin})" for hit in located) or "nothing"
    message = (
        f"delvewheel --ignore-existing --no-mangle-all: vendored {vendored} into {Path(target.name).name} "
        f"(providers {located_s:.1f} s, delvewheel {repaired_s:.0f} s); closure checked in "
        f"{time.monotonic() - started:.0f} s: {report.summary()}"
    )
    return StageResult(outputs={"repaired_wheel": Artifact.of(target)}, checks=tuple(checks), message=message)


# --- platforms -------------------------------------------------------------------------------------------

REPAIRERS: Mapping[str, Callable[[Context, Path], StageResult]] = {"linux-64": _repair_linux, "win-64": _repair_windows}
UNSUPPORTED: Mapping[str, str] = {}


STAGE = Stage(name=NAME, run=run, reads=("built_wheel",), writes=("repaired_wheel",))
