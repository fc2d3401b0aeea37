"""auditwheel, as the repair stage runs it on linux-64: its analysis of a wheel for a manylinux tag, its repair with
the libraries that must never be grafted excluded, and which those are (torch's and a companion's repair share it)."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import archives
from torchbuild.host.proc import ToolError, run_tool
from torchbuild.platforms.linux import auditwheel_api, elf
from torchbuild.wheel.repair_report import Vendored

NAME = "repair"
AUDITWHEEL_TIMEOUT_S = 3600


def auditwheel_excludes(wheel: Path, declared: Mapping[str, str] | None = None) -> dict[str, str]:
    """SONAME patterns auditwheel must not graft, with the reason.

    - Driver libraries (libcuda.so*, libnvidia-ml.so*): they belong to the installed NVIDIA driver.
    - Every shared library the wheel ships itself (torch/lib/libtorch_cpu.so, libc10.so, libgomp.so.1, ...): they
      are found in the wheel through $ORIGIN at run time, which the closure check below verifies. Without the
      exclude, auditwheel looks them up on the build machine for ELF files whose RUNPATH does not reach torch/lib
      (torch 2.13's torch/bin/test_shim has only $ORIGIN) and either fails ("required library libtorch.so could
      not be located") or grafts a second copy, e.g. the system's libgomp.so.1 beside torch/lib/libgomp.so.1:
      two OpenMP runtimes in one process.
    - The libraries the wheel's declared requirements install (``declared``: library file name -> requirement;
      libcudart.so.12 from nvidia-cuda-runtime-cu12, ...): they stay dependencies, as upstream ships them, and the
      wheel's RPATH finds them in site-packages/nvidia/*/lib.
    """
    excludes = dict(elf.DRIVER_LIBRARIES)
    for name, who in (declared or {}).items():
        excludes.setdefault(name, f"installed by the declared requirement {who}")
    with archives.open_zip(wheel) as archive:
        for name in archive.namelist():
            if elf.SHARED_OBJECT.search(name):
                excludes.setdefault(Path(name).name, f"shipped in the wheel as {name}")
    return excludes


@dataclass(frozen=True)
class Analysis:
    """What auditwheel's analysis says about a wheel for one target tag."""

    graft: tuple[str, ...]  # libraries it would vendor for the target
    found_at: Mapping[str, str]  # of those, where this machine has each
    unlocated: tuple[str, ...]  # of those, the ones not found on this machine (nothing to vendor them from)
    eligible: bool  # the wheel's symbols/ISA allow the target tag
    consistent_with: str  # the best tag auditwheel finds the wheel consistent with


def analyse(wheel: Path, platform_tag: str, excludes: Mapping[str, str]) -> Analysis:
    """auditwheel's own analysis (the one `auditwheel show` and `auditwheel repair` run), for the target tag."""
    auditwheel_api.clear_caches()
    policies, wanted = elf.manylinux_policies(platform_tag)
    base = platform_tag[: -len("_" + policies.architecture.value)]
    try:
        info: Any = auditwheel_api.analyze_wheel_abi(policies, wheel, frozenset(excludes), base)
    except auditwheel_api.non_platform_error() as exc:
        raise StageFailed(NAME, f"{wheel}: {getattr(exc, 'message', exc)}") from None
    except (ValueError, RuntimeError, OSError) as exc:
        raise StageFailed(NAME, f"auditwheel cannot analyse {wheel}: {exc}") from None
    libs = info.external_refs[wanted.name].libs
    return Analysis(
        graft=tuple(sorted(libs)),
        found_at={name: str(path) for name, path in libs.items() if path is not None},
        unlocated=tuple(sorted(name for name, path in libs.items() if path is None)),
        eligible=not wanted > info.overall_policy,
        consistent_with=str(info.overall_policy.name),
    )


def auditwheel_repair(
    wheel: Path, tag: str, excludes: Mapping[str, str], target: Path, log: Path, env: Mapping[str, str]
) -> None:
    """auditwheel's repair of ``wheel`` to ``tag`` into ``target``, with ``excludes`` never grafted."""
    argv: list[str] = [sys.executable, "-m", "auditwheel", "repair", "--plat", tag, "--only-plat"]
    for pattern in excludes:
        argv += ["--exclude", pattern]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="auditwheel-", dir=target.parent) as tmp:
        with as_stage_failure(NAME, ToolError):
            run_tool(
                [*argv, "--wheel-dir", tmp, str(wheel)],
                log=log,
                env=dict(env),
                timeout=AUDITWHEEL_TIMEOUT_S,
                what="auditwheel repair",
            )
        made = sorted(Path(tmp).glob("*.whl"))
        if [p.name for p in made] != [target.name]:
            names = ", ".join(p.name for p in made) or "no wheel"
            raise StageFailed(NAME, f"auditwheel repair of {wheel} made {names}; expected {target.name}")
        shutil.move(str(made[0]), target)


def grafted(wheel: Path, target: Path, analysis: Analysis) -> list[Vendored]:
    """The libraries auditwheel put into the repaired ``target`` of ``wheel`` (renamed libfoo-<hash>.so.1), and where
    they came from: one reader for torch's repair and the repair of each package beside it."""
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
