"""The platform module of a cell's platform name (win-64, linux-64); the others refused naming the valid ones."""

from __future__ import annotations

from torchbuild.errors import UserError, one_of
from torchbuild.platforms.linux.build import Linux
from torchbuild.platforms.target import Platform
from torchbuild.platforms.windows.build import Windows

REFUSED_PLATFORMS = {
    "win-32": "PyTorch does not support 32-bit Windows: use 64-bit Windows and 64-bit Python (--platform win-64).",
    "linux-32": "PyTorch does not support 32-bit Linux: use --platform linux-64.",
}


def platform_module(name: str) -> Platform:
    """The platform module of a cell's platform; 32-bit and unknown platforms are refused naming the valid ones."""
    modules: dict[str, Platform] = {"win-64": Windows(), "linux-64": Linux()}
    if name in REFUSED_PLATFORMS:
        raise UserError(REFUSED_PLATFORMS[name])
    if name not in modules:
        raise UserError(f"Unknown platform '{name}'. Valid platforms: {one_of(modules)}.")
    return modules[name]
