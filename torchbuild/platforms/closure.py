"""The import closure of a wheel's binaries, one report type for PE (platforms/windows/pe.py) and ELF
(platforms/linux/elf.py) files: every import resolved (where to), missing (who needs what, where it was looked for),
or not enforced (in an executable, which is not loaded by import), and every file that cannot be used.

Its Checks: one failed Check per missing import, one skipped Check per gap in an executable (reported, not
enforced), one failed Check per unusable file, then the summary, passed only when nothing is missing or unusable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from torchbuild.results import Check, Status

F = TypeVar("F")  # what the format reads of one file (PeInfo, ElfInfo)


@dataclass(frozen=True)
class Resolved:
    file: str
    needed: str
    via: str  # how it resolves: "wheel", "system", ... (each format names its own)
    target: str  # the file in the wheel, or why it is allowed
    delay: bool = False  # a delay-load import (PE)


@dataclass(frozen=True)
class Missing:
    file: str
    needed: str
    searched: tuple[str, ...]  # wheel directories searched
    elsewhere: tuple[str, ...]  # files of that name elsewhere in the wheel (not on the search path)
    message: str  # what a user reads, in the format's words
    delay: bool = False
    executable: bool = False  # in an executable: reported, not enforced


@dataclass(frozen=True)
class Unusable:
    """A file the closure cannot use: unreadable, or built for another machine."""

    file: str
    reason: str


@dataclass(frozen=True)
class ClosureFormat(Generic[F]):
    """How one binary format reports its closure: the check names and codes, and its summary line."""

    closure: tuple[str, str]  # the summary's (name, code)
    missing: tuple[str, str]
    unenforced: tuple[str, str]
    unusable: tuple[str, str]
    summary: Callable[[ClosureReport[F]], str]


@dataclass(frozen=True)
class ClosureReport(Generic[F]):
    form: ClosureFormat[F]
    scope: str  # what the imports were resolved for: the machine (PE, AMD64) or the manylinux policy (ELF)
    files: tuple[F, ...]
    resolved: tuple[Resolved, ...]
    missing: tuple[Missing, ...]  # of libraries and extensions: the stage fails
    bad: tuple[Unusable, ...]
    unenforced: tuple[Missing, ...] = ()  # of executables: reported only

    @property
    def ok(self) -> bool:
        return not self.missing and not self.bad

    def count(self, via: str) -> int:
        return sum(1 for r in self.resolved if r.via == via)

    @property
    def missing_names(self) -> tuple[str, ...]:
        return tuple(sorted({m.needed.lower() for m in self.missing}))

    @property
    def machine(self) -> str:
        """A PE report's machine."""
        return self.scope

    @property
    def policy(self) -> str:
        """An ELF report's manylinux policy."""
        return self.scope

    def summary(self) -> str:
        text = self.form.summary(self)
        if self.unenforced:
            files = sorted({m.file for m in self.unenforced})
            text += f"; {len(self.unenforced)} unresolved in executables not loaded by import ({', '.join(files)})"
        return text

    def checks(self) -> tuple[Check, ...]:
        form = self.form
        found = [Check(name=form.missing[0], status="failed", message=m.message, code=form.missing[1], file=m.file)
                 for m in self.missing]  # fmt: skip
        found += [
            Check(name=form.unenforced[0], status="skipped", message=m.message, code=form.unenforced[1], file=m.file)
            for m in self.unenforced
        ]
        found += [
            Check(name=form.unusable[0], status="failed", message=b.reason, code=form.unusable[1], file=b.file)
            for b in self.bad
        ]
        status: Status = "passed" if self.ok else "failed"
        return (*found, Check(name=form.closure[0], status=status, message=self.summary(), code=form.closure[1]))


def with_hints(report: ClosureReport[F], hint: Callable[[str], str]) -> ClosureReport[F]:
    """``report`` with ``hint(needed)`` appended to the message of each missing import where it says something
    (which declared requirement should have provided the library)."""

    def hinted(gap: Missing) -> Missing:
        extra = hint(gap.needed)
        return dataclasses.replace(gap, message=f"{gap.message}; {extra}") if extra else gap

    return dataclasses.replace(
        report, missing=tuple(map(hinted, report.missing)), unenforced=tuple(map(hinted, report.unenforced))
    )


def left_to_dependencies(report: ClosureReport[F]) -> str:
    """Which imports resolve to packages installed beside the artifact (its declared requirements), by package: one
    line for a stage's message ("libcudart.so.12 from nvidia-cuda-runtime-cu12==12.8.90 (...)")."""
    by_provider: dict[str, set[str]] = {}
    for hit in report.resolved:
        if hit.via == "dependency":
            by_provider.setdefault(hit.target.rpartition("installed by ")[2], set()).add(hit.needed)
    return "; ".join(f"{', '.join(sorted(names))} from {who}" for who, names in sorted(by_provider.items()))
