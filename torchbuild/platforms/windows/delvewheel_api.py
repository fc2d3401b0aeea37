"""delvewheel's private ``_dll_list``, read in this one place: its list of the DLLs every Windows 7 SP1+ install has
(1,400+ names for AMD64, kept from real Windows installs, and its name patterns for the API sets) and its pattern of
the Visual C++ redistributable's DLLs. delvewheel does not publish them as an API, so pyproject.toml admits only the
minor release tested (TESTED), and ``check`` says clearly what moved when another is installed
(tests/unit/test_private_apis.py runs it).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from torchbuild.errors import UserError

TESTED = "1.13"  # delvewheel's minor release whose _dll_list this module reads


class DelvewheelMoved(UserError):
    """The installed delvewheel no longer has what this module reads."""


def _moved(what: str) -> DelvewheelMoved:
    from importlib import metadata  # 15 ms: only when a version is asked for

    version = metadata.version("delvewheel")
    return DelvewheelMoved(
        f"delvewheel {version} has no {what} in its private module delvewheel._dll_list, which torchbuild reads for "
        f"the DLLs every Windows has and the VC runtime's names; torchbuild is tested with delvewheel {TESTED}.x: "
        f'install "delvewheel>={TESTED},<{_next(TESTED)}" (pyproject.toml) or adapt '
        "torchbuild/platforms/windows/delvewheel_api.py"
    )


def _next(minor: str) -> str:
    major, _, rest = minor.partition(".")
    return f"{major}.{int(rest) + 1}"


@functools.cache
def _dll_list() -> Any:
    """delvewheel._dll_list, checked to have what this module reads."""
    try:
        from delvewheel import _dll_list
    except ImportError:
        raise _moved("module at all") from None
    machines = getattr(_dll_list, "MachineType", None)
    if machines is None or "AMD64" not in getattr(machines, "__members__", {}):
        raise _moved("MachineType enum with AMD64")
    names = getattr(_dll_list, "ignore_names", None)
    if not isinstance(names, dict) or not names.get(machines.__members__["AMD64"]):
        raise _moved("ignore_names (DLL names by machine type)")
    if not all(isinstance(rx, re.Pattern) for rx in getattr(_dll_list, "ignore_regexes", [None])):
        raise _moved("ignore_regexes (compiled name patterns)")
    if not isinstance(getattr(_dll_list, "vc_redist", None), re.Pattern):
        raise _moved("vc_redist pattern")
    return _dll_list


def check() -> str:
    """The installed delvewheel's version, once what this module reads is found there; DelvewheelMoved if not."""
    from importlib import metadata  # 15 ms: only when a version is asked for

    _dll_list()
    return metadata.version("delvewheel")


def system_dlls(machine: str) -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """The DLL names (lower case) on every Windows of ``machine`` (AMD64, I386, ARM64), and the name patterns."""
    module = _dll_list()
    kind = module.MachineType.__members__.get(machine)
    names = module.ignore_names.get(kind, set()) if kind is not None else set()
    return frozenset(str(n).lower() for n in names), tuple(module.ignore_regexes)


def is_vc_redist(name: str) -> bool:
    """A DLL of Microsoft's Visual C++ redistributable by delvewheel's pattern (lower-case name)."""
    return bool(_dll_list().vc_redist.fullmatch(name))
