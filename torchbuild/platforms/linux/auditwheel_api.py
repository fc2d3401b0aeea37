"""auditwheel's Python modules, read in this one place. auditwheel publishes a command line, not an API: the repair
stage's analysis (``wheel_abi.analyze_wheel_abi``, and the caches of ``lddtree`` and ``wheel_abi`` it clears),
the fast manylinux verdict (``lddtree._get_platform``, ``elfutils``) and the policy data (``policy``,
``architecture``, ``libc``) are its internals. So pyproject.toml admits only the minor release tested (TESTED), and
``check`` says clearly what moved when another is installed (tests/unit/test_private_apis.py runs it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torchbuild.errors import UserError

TESTED = "6.8"  # auditwheel's minor release whose internals this module reads
# module -> the names read from it; a callable named with ".cache_clear" must be a functools cache
USED: Mapping[str, tuple[str, ...]] = {
    "auditwheel.lddtree": ("_get_platform", "load_ld_paths.cache_clear", "parse_ld_so_conf.cache_clear"),
    "auditwheel.wheel_abi": ("analyze_wheel_abi", "get_wheel_elfdata.cache_clear"),
    "auditwheel.error": ("NonPlatformWheelError",),
    "auditwheel.elfutils": ("elf_find_versioned_symbols", "elf_references_pyfpe_jbuf"),
    "auditwheel.policy": ("WheelPolicies",),
    "auditwheel.architecture": ("Architecture",),
    "auditwheel.libc": ("Libc",),
}

# The files auditwheel's glibc policies come from, its code and its data: the same bytes give the same policies.
POLICY_SOURCES = ("policy/__init__.py", "policy/manylinux-policy.json", "architecture.py", "libc.py")


def policy_sources_digest() -> str | None:
    """The sha256 of auditwheel's POLICY_SOURCES, found without importing auditwheel (it loads pyelftools: 90 ms
    of a rerun); None where they cannot be read."""
    try:
        spec = importlib.util.find_spec("auditwheel")
        folders = list(spec.submodule_search_locations or ()) if spec else []
        digest = hashlib.sha256()
        for name in POLICY_SOURCES:
            data = (Path(folders[0]) / name).read_bytes()
            digest.update(f"{name} {len(data)}\n".encode())
            digest.update(data)
        return digest.hexdigest()
    except (IndexError, OSError, ValueError, ImportError):
        return None


class AuditwheelMoved(UserError):
    """The installed auditwheel no longer has what this module reads."""


@functools.cache
def _modules() -> dict[str, Any]:
    """Every module USED names, checked to have what is read from it."""
    found: dict[str, Any] = {}
    for name, attributes in USED.items():
        try:
            module = importlib.import_module(name)
        except ImportError:
            raise _moved(name) from None
        for dotted in attributes:
            value: Any = module
            for part in dotted.split("."):
                value = getattr(value, part, None)
            if value is None:
                raise _moved(f"{name}.{dotted}")
        found[name.rpartition(".")[2]] = module
    return found


def _moved(what: str) -> AuditwheelMoved:
    from importlib import metadata  # 15 ms: only when a version is asked for

    version = metadata.version("auditwheel")
    major, _, minor = TESTED.partition(".")
    return AuditwheelMoved(
        f"auditwheel {version} has no {what}, an internal of auditwheel torchbuild reads (the repair stage's "
        f"analysis, the manylinux policies); torchbuild is tested with auditwheel {TESTED}.x: install "
        f'"auditwheel>={TESTED},<{major}.{int(minor) + 1}" (pyproject.toml) or adapt '
        "torchbuild/platforms/linux/auditwheel_api.py"
    )


def check() -> str:
    """The installed auditwheel's version, once everything this module reads is found there; AuditwheelMoved
    if not."""
    from importlib import metadata  # 15 ms: only when a version is asked for

    _modules()
    return metadata.version("auditwheel")


def clear_caches() -> None:
    """auditwheel memoises the library search path (LD_LIBRARY_PATH, ld.so.conf) and each wheel's ELF data for the
    life of the process; clearing them makes an analysis start from what is true now, as an `auditwheel repair`
    process after it will."""
    found = _modules()
    for memo in (
        found["lddtree"].load_ld_paths,
        found["lddtree"].parse_ld_so_conf,
        found["wheel_abi"].get_wheel_elfdata,
    ):
        memo.cache_clear()


def analyze_wheel_abi(policies: Any, wheel: Path, excludes: frozenset[str], policy_base: str) -> Any:
    """auditwheel's analysis of ``wheel`` (what `auditwheel show` and `repair` run) for ``policies``' libc and
    architecture, grafting allowed. Raises NonPlatformWheelError (``non_platform_error``), ValueError,
    RuntimeError or OSError."""
    return _modules()["wheel_abi"].analyze_wheel_abi(
        policies.libc,
        policies.architecture,
        wheel,
        excludes,
        disable_isa_ext_check=False,
        allow_graft=True,
        requested_policy_base_name=policy_base,
    )


def non_platform_error() -> type[Exception]:
    """auditwheel's error for a wheel with no platform-specific binaries."""
    error: type[Exception] = _modules()["error"].NonPlatformWheelError
    return error


def extended_architecture(elf: Any) -> Any:
    """The instruction-set level an ELF file needs (x86-64-v3, ...), or None; ValueError on an unknown ISA."""
    return _modules()["lddtree"]._get_platform(elf).extended_architecture


def versioned_symbols(elf: Any) -> Any:
    """(library, symbol version) of each versioned symbol an ELF file imports."""
    return _modules()["elfutils"].elf_find_versioned_symbols(elf)


def references_pyfpe_jbuf(elf: Any) -> bool:
    return bool(_modules()["elfutils"].elf_references_pyfpe_jbuf(elf))


def architectures() -> Any:
    """auditwheel's Architecture enum."""
    return _modules()["architecture"].Architecture


def glibc_policies(architecture: Any) -> Any:
    """auditwheel's WheelPolicies of glibc (manylinux) for ``architecture``."""
    found = _modules()
    policies: Callable[..., Any] = found["policy"].WheelPolicies
    return policies(libc=found["libc"].Libc.GLIBC, arch=architecture)
