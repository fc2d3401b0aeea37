"""What stages and checks produce: artifacts, named checks, a stage's result. The bottom layer: it imports nothing
from torchbuild, so every other module can use these types."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Status = Literal["passed", "failed", "skipped"]


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

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "message": self.message, "code": self.code, "file": self.file}


@dataclass(frozen=True)
class StageResult:
    status: Status = "passed"
    outputs: Mapping[str, Artifact] = field(default_factory=dict)  # by the names the stage declares it writes
    checks: tuple[Check, ...] = ()
    message: str = ""  # one line for the step log, e.g. "skipped: needs a win-64 host"
    ran_on: str = ""  # where its checks ran, e.g. "under Wine 8.0, CPython 3.11.9 embeddable" (smoke)
