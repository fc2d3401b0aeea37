"""The stages of one cell. Each module has ``run(ctx: Context) -> StageResult`` and reads only the Plan and
the named outputs of earlier stages (``ctx.inputs``).

source -> build -> repair -> conda -> verify -> smoke -> publish
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from torchbuild.plan import Plan

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
class RunOptions:
    """Options of one run that are not part of the Plan (they do not change what is built)."""

    wheel: Path | None = None  # --wheel: prebuilt source
    force: bool = False
    replace: bool = False  # --replace: publish over a different file under a published name
    cache_dir: Path = Path.home() / ".cache" / "torchbuild"
    conda_format: Literal["conda", "tar.bz2"] = "conda"
    compression_level: int = 5
    compression_threads: int = 2
    repodata: Path | None = None  # the real repodata to solve against (../shared/data/repodata)
    source_dir: Path | None = None  # --source-dir: compile this checkout
    git_ref: str | None = None  # --git-ref: clone this tag, branch or full commit SHA (with submodules) and compile it
    git_url: str = "https://github.com/pytorch/pytorch"  # --git-url
    # "pytorch": the source must be a PyTorch checkout of the Plan's release (checked) and the wheel must match
    # the Plan; "project": any setuptools project built the same way (the tests' fixture packages).
    source_kind: Literal["pytorch", "project"] = "pytorch"


@dataclass(frozen=True)
class Context:
    plan: Plan
    root: Path  # the workspace: plan.work_dir and the channel are relative to it
    options: RunOptions
    inputs: Mapping[str, Artifact] = field(default_factory=dict)

    def stage_dir(self, stage: str) -> Path:
        path = self.root / self.plan.stage_dirs[stage]
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def channel_dir(self) -> Path:
        return self.root / self.plan.channel


@dataclass(frozen=True)
class StageResult:
    status: Status = "passed"
    outputs: Mapping[str, Artifact] = field(default_factory=dict)
    checks: tuple[Check, ...] = ()
    message: str = ""  # one line for the step log, e.g. "skipped: needs a win-64 host"
