"""Known traps of Windows CUDA builds, checked before the compile starts (DESIGN.md, toolchains.yaml):
an MSVC toolset newer (or older) than this nvcc accepts, and Visual Studio updates known to break PyTorch."""

from __future__ import annotations

from torchbuild.config.compat import Compat, CudaRelease, version_key
from torchbuild.platforms.toolchain import Requirement
from torchbuild.platforms.windows.msvc import VsInstall, known_bad


def cuda_msvc_table(compat: Compat) -> str:
    """The CUDA -> MSVC table as lines, for the message that refuses a toolset."""
    rows = [f"CUDA {v}: MSVC {compat.cuda[v].msvc}" for v in compat.cuda_versions()]
    return "; ".join(rows)


def check(toolset_full: str, install: VsInstall, cuda: CudaRelease | None, compat: Compat) -> list[Requirement]:
    results = []
    short = ".".join(toolset_full.split(".")[:2])
    if cuda is not None:
        name = f"MSVC {short} accepted by nvcc {cuda.version}"
        if short in cuda.msvc:
            results.append(Requirement(name, True, f"{toolset_full} is in {cuda.msvc}"))
        else:
            direction = "newer" if version_key(short) > version_key(cuda.msvc.max) else "older"
            results.append(
                Requirement(
                    name,
                    False,
                    f"MSVC {toolset_full} is {direction} than nvcc {cuda.version} accepts ({cuda.msvc}); "
                    "nvcc stops with "
                    "'unsupported Microsoft Visual Studio version' (and -allow-unsupported-compiler does not help: "
                    f"the STL itself refuses old nvcc). Table: {cuda_msvc_table(compat)}",
                    f"install an MSVC toolset in {cuda.msvc} and pin it with --msvc, or build another CUDA",
                )
            )
    for bad in known_bad(install, compat):
        results.append(
            Requirement(
                f"Visual Studio {install.update} is not a known-bad update",
                False,
                f"{install.name} {install.update}: {bad.error}: {' '.join(bad.message.split())}",
                bad.fix,
            )
        )
    if not known_bad(install, compat):
        name = "Visual Studio update not known to break PyTorch"
        results.append(Requirement(name, True, f"{install.name} {install.update}"))
    return results
