"""What stages and checks produce: artifacts, named checks, a stage's result. The bottom layer: it imports nothing
from torchbuild, so every other module can use these types."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# "unverified": a check that guards the user could not run here (no repodata and no channel reachable, no Python of
# the cell): the cell goes on and is published, and every report says it is unverified, never passed.
Status = Literal["passed", "failed", "skipped", "unverified"]


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Artifact:
    """A file a stage produced, with what a user needs to trust it."""

    path: Path
    sha256: str
    size: int

    @classmethod
    def of(cls, path: Path) -> Artifact:
        return cls(path=path, sha256=sha256_of(path), size=path.stat().st_size)

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class Check:
    """One named result inside a stage (a package check, a smoke check)."""

    name: str
    status: Status
    message: str = ""
    code: str = ""  # e.g. conda-verify's C1146
    file: str = ""
    duration: float | None = None  # seconds: the check's own, or (``timed_with``) those of its group
    timed_with: str = ""  # the group of checks made in one go whose time ``duration`` is; "" where it is its own

    def to_dict(self) -> dict[str, object]:
        duration = None if self.duration is None else round(self.duration, 3)
        return {"name": self.name, "status": self.status, "message": self.message, "code": self.code,
                "file": self.file, "duration": duration, "timed_with": self.timed_with}  # fmt: skip


def timed(make: Callable[[], Check]) -> Check:
    """The check ``make`` makes, with the seconds it took."""
    started = time.perf_counter()
    check = make()
    return dataclasses.replace(check, duration=time.perf_counter() - started, timed_with="")


def timed_together(group: str, make: Callable[[], Sequence[Check]]) -> list[Check]:
    """The checks ``make`` makes in one go (one read of a file serves them all), each with the seconds they took
    together and ``group`` naming them; a single check is timed as its own."""
    started = time.perf_counter()
    checks = make()
    return with_time(checks, time.perf_counter() - started, group)


def with_time(checks: Sequence[Check], seconds: float, group: str) -> list[Check]:
    """``checks``, made together in ``seconds``, each with that time and ``group`` naming them (see timed_together)."""
    return [dataclasses.replace(c, duration=seconds, timed_with=group if len(checks) > 1 else "") for c in checks]


def timings(checks: Sequence[Check]) -> list[tuple[float, str]]:
    """(seconds, what) of every timed check, and once of each group timed together, slowest first."""
    rows: list[tuple[float, str]] = []
    groups: dict[str, list[Check]] = {}
    for check in checks:
        if check.duration is None:
            continue
        if check.timed_with:
            groups.setdefault(check.timed_with, []).append(check)
        else:
            rows.append((check.duration, f"{check.code} {check.name}".strip()))
    for group, members in groups.items():
        codes = ", ".join(dict.fromkeys(c.code or c.name for c in members))
        seconds = max(c.duration or 0.0 for c in members)
        rows.append((seconds, f"{group} ({codes}: {len(members)} checks timed together)"))
    return sorted(rows, key=lambda row: -row[0])


@dataclass(frozen=True)
class StageResult:
    status: Status = "passed"
    outputs: Mapping[str, Artifact] = field(default_factory=dict)  # by the names the stage declares it writes
    checks: tuple[Check, ...] = ()
    message: str = ""  # one line for the step log, e.g. "skipped: needs a win-64 host"
    ran_on: str = ""  # where its checks ran, e.g. "under Wine 8.0, CPython 3.11.9 embeddable" (smoke)


# --- checks by code ---------------------------------------------------------------------------------------
# Every check has a code: conda-verify's C11xx where it checks the same thing (users who know conda-verify
# recognise them; conda-verify itself is not on the package index here), and torchbuild's own TBxxx for what
# conda-verify does not check: TB1xx conda package, TB2xx wheel, TB3xx solve.

# code -> what passing means (the Check's name). Each module that makes checks registers its codes once, with
# ``define`` (or ``conda_archive.package_check``), where the check is written.
CODES: dict[str, str] = {}


def define(code: str, title: str) -> str:
    """Register a check's code and title; returns the code. A code means one thing everywhere."""
    known = CODES.setdefault(code, title)
    if known != title:
        raise ValueError(f"check code {code} is registered twice: {known!r} and {title!r}")
    return code


SHOWN = 5  # problems named in one check's message; the rest are counted


def result(code: str, file: Path | str, problems: Sequence[str], note: str = "") -> Check:
    """A passed Check when ``problems`` is empty (with ``note`` as its message), else a failed one naming them."""
    if not problems:
        return Check(name=CODES[code], status="passed", message=note, code=code, file=str(file))
    message = "; ".join(problems[:SHOWN])
    if len(problems) > SHOWN:
        message += f" (and {len(problems) - SHOWN} more)"
    return Check(name=CODES[code], status="failed", message=message, code=code, file=str(file))


def skipped(code: str, file: Path | str, reason: str) -> Check:
    return Check(name=CODES[code], status="skipped", message=reason, code=code, file=str(file))


def unverified(code: str, file: Path | str, reason: str) -> Check:
    """A check that could not run here; ``reason`` says why and what runs it ("not run: ..." in every report)."""
    return Check(name=CODES[code], status="unverified", message=f"not run: {reason}", code=code, file=str(file))


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == "failed"]


def summary(failed: Sequence[Check]) -> str:
    """One line per failed check: code, file, what is wrong."""
    return "\n".join(f"  {c.code} {c.file}: {c.name}: {c.message}" for c in failed)
