"""The VC++ runtime a wheel's binaries need, read from the binaries themselves.

The VC++ 2015-2022 runtime (msvcp140.dll, vcruntime140*.dll, ...) is backward compatible, never forward: a binary
linked by MSVC 14.x needs a runtime at least as new as 14.x. Binaries of MSVC 14.40 and later use a constexpr
std::mutex that an older msvcp140.dll does not initialise: c10.dll then fails in its startup code (WinError 1114;
pytorch issue 169429), and an export check cannot see it (14.34 and 14.44 export the same names). So the floor is a
version: the newest linker version (PE optional header) among the files that import the VC runtime. A vendored
runtime older than the floor is refused, and the conda package depends on a runtime package at least that new.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchbuild.knowledge.compat import version_key
from torchbuild.platforms.windows import delvewheel_api
from torchbuild.wheel.repair_report import Floor

if TYPE_CHECKING:
    from torchbuild.knowledge.compat import VcRuntimeRule
    from torchbuild.platforms.windows.pe import PeInfo


def is_vc_runtime(name: str) -> bool:
    """The DLLs of Microsoft's Visual C++ redistributable (delvewheel's maintained pattern); the Universal CRT
    (ucrtbase.dll) is part of Windows 10 and later, not of this runtime."""
    low = name.lower()
    return delvewheel_api.is_vc_redist(low) and not low.startswith("ucrtbase")


def floor(pes: Iterable[PeInfo]) -> Floor | None:
    """The newest linker version among the PE files that import (or delay-load) the VC runtime; None when none
    does. Linker versions outside MSVC 14.x (Intel's, mingw's) do not say which VC runtime they need."""
    best: Floor | None = None
    for pe in pes:
        if not any(is_vc_runtime(name) for name in (*pe.imports, *pe.delay_imports)):
            continue
        version = version_key(pe.linker)
        if len(version) < 2 or version[0] != 14:
            continue
        if best is None or version[:2] > version_key(best.version)[:2]:
            best = Floor(version=f"{version[0]}.{version[1]}", set_by=pe.path)
    return best


def too_old(found: Floor | None, dll: str, file_version: str | None) -> str | None:
    """Why ``dll`` of ``file_version`` cannot serve the binaries (None when it can)."""
    if found is None or not is_vc_runtime(dll):
        return None
    if file_version is None:
        return f"{dll} has no version resource: cannot tell whether it serves MSVC {found.version} binaries"
    if found.admits(file_version):
        return None
    return (
        f"{dll} is {file_version}, older than the MSVC {found.version} that linked {found.set_by}; binaries of "
        f"MSVC {found.version} need {dll} >= {found.version} (an older one fails at import, WinError 1114)"
    )


def conda_spec(rule: VcRuntimeRule, found: Floor | None) -> str:
    """The conda package's dependency on the VC runtime: at least the rule's minimum and the binaries' floor."""
    version = rule.minimum
    if found is not None and version_key(found.version) > version_key(rule.minimum):
        version = found.version
    if rule.versions:  # a package whose versions name Visual Studio (the `vc` metapackage): map the MSVC version
        version = next((v for spec, v in rule.versions if Version(version) in SpecifierSet(spec)), version)
    return f"{rule.package} >={version}" + (f",<{rule.upper}" if rule.upper else "")
