"""Which platform this host is, by conda's subdir names (linux-64, win-64, osx-arm64, ...), and whether a Windows host
is Wine: the one place that asks."""

from __future__ import annotations

import ctypes
import platform as _platform
import sys

OS_NAMES = {"win32": "win", "linux": "linux", "darwin": "osx"}
MACHINES = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "arm64", "ppc64le": "ppc64le",
            "i386": "32", "i686": "32", "x86": "32"}  # fmt: skip


def host_platform() -> str:
    """This host's conda subdir, e.g. linux-64 or win-64; ``<os>-<machine>`` as Python reports them otherwise."""
    system = OS_NAMES.get("linux" if sys.platform.startswith("linux") else sys.platform, sys.platform)
    machine = _platform.machine().lower()
    arch = MACHINES.get(machine, machine)
    if system == "osx" and arch == "aarch64":
        arch = "arm64"
    if system == "linux" and arch == "arm64":
        arch = "aarch64"
    return f"{system}-{arch}"


def wine_version() -> str | None:
    """Wine's version (8.0) when this is a Windows process under Wine (its ntdll exports wine_get_version), else
    None: on Linux, and on Windows itself."""
    if sys.platform != "win32":
        return None
    try:
        getter = ctypes.WinDLL("ntdll").wine_get_version  # type: ignore[attr-defined,unused-ignore]
    except (OSError, AttributeError):
        return None
    getter.restype = ctypes.c_char_p
    return str(getter().decode())
