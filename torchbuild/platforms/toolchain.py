"""Finding and activating the compilers a Plan needs on this host (MSVC + nvcc on Windows, gcc + nvcc on Linux).

Each module keeps its OS calls (running vswhere, vcvarsall.bat, nvcc, gcc) in a few small functions at the edge;
everything that reads their output is a pure function, tested on recorded output.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchbuild.errors import UserError


class ToolchainError(UserError):
    """A requirement of the cell is missing or unusable; the message says how to fix it."""


@dataclass(frozen=True)
class Requirement:
    """One thing a cell's build needs on this host, found or not. ``doctor`` prints a list of these."""

    name: str  # e.g. "nvcc 12.4", "Visual Studio (vswhere)"
    found: bool
    detail: str  # where it was found and its version, or what was looked at
    fix: str = ""  # what to do when it is missing
    required: bool = True  # False: the build runs without it (e.g. sccache)

    @property
    def status(self) -> str:
        if self.found:
            return "found"
        return "missing" if self.required else "optional, missing"


def missing(requirements: tuple[Requirement, ...] | list[Requirement]) -> list[Requirement]:
    return [r for r in requirements if r.required and not r.found]


def describe_missing(requirements: tuple[Requirement, ...] | list[Requirement]) -> str:
    lines = []
    for r in missing(requirements):
        lines.append(f"  - {r.name}: {r.detail}")
        if r.fix:
            lines.append(f"      fix: {r.fix}")
    return "\n".join(lines)
