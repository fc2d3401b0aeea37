"""The Checks of an import-closure report, the same for ELF (torchbuild/elf.py) and PE (torchbuild/pe.py) files:
one failed Check per missing import, one skipped Check per gap in an executable (reported, not enforced), one failed
Check per unusable file, then the summary, passed only when nothing is missing or unusable."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from torchbuild.results import Check


class Gap(Protocol):
    @property
    def file(self) -> str: ...

    @property
    def message(self) -> str: ...


class Unusable(Protocol):
    @property
    def file(self) -> str: ...

    @property
    def reason(self) -> str: ...


@dataclass(frozen=True)
class ClosureNames:
    """The names and codes one binary format reports its closure under."""

    closure: tuple[str, str]  # the summary's (name, code)
    missing: tuple[str, str]
    unenforced: tuple[str, str]
    unusable: tuple[str, str]


def closure_checks(
    names: ClosureNames,
    missing: Sequence[Gap],
    unenforced: Sequence[Gap],
    unusable: Sequence[Unusable],
    summary: str,
) -> tuple[Check, ...]:
    checks = [
        Check(name=names.missing[0], status="failed", message=m.message, code=names.missing[1], file=m.file)
        for m in missing
    ]
    checks += [
        Check(name=names.unenforced[0], status="skipped", message=m.message, code=names.unenforced[1], file=m.file)
        for m in unenforced
    ]
    checks += [
        Check(name=names.unusable[0], status="failed", message=b.reason, code=names.unusable[1], file=b.file)
        for b in unusable
    ]
    ok = not missing and not unusable
    closure = Check(name=names.closure[0], status="passed" if ok else "failed", message=summary, code=names.closure[1])
    return (*checks, closure)
