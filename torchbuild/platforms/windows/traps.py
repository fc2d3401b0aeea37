"""Known traps of Windows CUDA builds, checked before the compile starts (DESIGN.md, toolchains.yaml):
an MSVC toolset newer (or older) than this nvcc accepts, and Visual Studio updates known to break PyTorch."""

from __future__ import annotations

from torchbuild.knowledge.compat import Range, version_key
from torchbuild.platforms.target import Toolchain
from torchbuild.platforms.toolchain import Requirement
from torchbuild.platforms.windows.msvc import VsInstall, known_bad


def check(toolset_full: str, install: VsInstall, toolchain: Toolchain) -> list[Requirement]:
    """The traps for the toolset found (``toolset_full``, of ``install``) and the Plan's toolchain."""
    results = []
    short = ".".join(toolset_full.split(".")[:2])
    if toolchain.nvcc is not None and toolchain.msvc_accepted:
        low, _, high = toolchain.msvc_accepted.partition("-")
        accepted = Range(min=low, max=high or low)
        nvcc = toolchain.nvcc
        name = f"MSVC {short} accepted by nvcc {nvcc}"
        if short in accepted:
            results.append(Requirement(name, True, f"{toolset_full} is in {accepted}"))
        else:
            direction = "newer" if version_key(short) > version_key(accepted.max) else "older"
            results.append(
                Requirement(
                    name,
                    False,
                    f"MSVC {toolset_full} is {direction} than nvcc {nvcc} accepts ({accepted}); "
                    "nvcc stops with "
                    "'unsupported Microsoft Visual Studio version' (and -allow-unsupported-compiler does not help: "
                    f"the STL itself refuses old nvcc). Table: {toolchain.msvc_table}",
                    f"install an MSVC toolset in {accepted} and pin it with --msvc, or build another CUDA",
                )
            )
    for bad in known_bad(install, toolchain.known_bad):
        results.append(
            Requirement(
                f"Visual Studio {install.update} is not a known-bad update",
                False,
                f"{install.name} {install.update}: {bad.error}: {' '.join(bad.message.split())}",
                bad.fix,
            )
        )
    if not known_bad(install, toolchain.known_bad):
        name = "Visual Studio update not known to break PyTorch"
        results.append(Requirement(name, True, f"{install.name} {install.update}"))
    return results
