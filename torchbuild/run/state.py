"""``build/<cell-id>/state.json``: what the last run of a cell recorded (its Plan, and each stage's result with the
hashes of what went in). This module is its one owner: where it lies, its shape, reading it back, writing it.

The runner reads it leniently (an unreadable file means every stage runs again, said as a warning); the smoke
command and the pin step read it strictly (an unreadable file is an error naming it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbuild.config import nesting
from torchbuild.config.build_version import OwnBuild
from torchbuild.errors import UserError
from torchbuild.host.console import console
from torchbuild.host.files import write_atomic
from torchbuild.plan import Plan
from torchbuild.run.records import StageRecord

FILE = "state.json"


def path_of(root: Path, work_dir: str) -> Path:
    """The state file of the cell whose work directory (``Plan.work_dir``) is ``work_dir``, below ``root``."""
    return root / work_dir / FILE


@dataclass(frozen=True)
class Recorded:
    """A state file as read back: the Plan it was recorded for (as JSON) and each stage's record, raw."""

    plan: Mapping[str, Any]
    stages: Mapping[str, Any]


def read(path: Path) -> Recorded:
    """The state file at ``path``; UserError naming the file when it is missing or not of the right shape."""
    if not path.is_file():
        raise UserError(
            f"{path}: no such file. Download the build job's artifact (its build/ directory) into "
            f"{path.parent.parent} first; the smoke command replays what the build recorded there."
        )
    try:
        raw = nesting.loads(path.read_text(encoding="utf-8"))
        stages = raw["stages"]
        plan = raw["plan"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unreadable state ({type(exc).__name__}: {exc}).") from None
    if not isinstance(stages, dict) or not isinstance(plan, dict):
        raise UserError(f"{path}: unreadable state ('stages' and 'plan' must be mappings).")
    return Recorded(plan=plan, stages=stages)


def recorded_release(path: Path) -> str | None:
    """The torch release the Plan recorded at ``path`` was resolved to; None when there is no readable one (the
    command that needs the file names what is wrong with it)."""
    try:
        release = read(path).plan.get("torch")
    except UserError:
        return None
    return release if isinstance(release, str) else None


def recorded_own_build(path: Path) -> OwnBuild | None:
    """The own build (version, origin, facts) the Plan recorded at ``path`` was resolved for; None for a release's."""
    try:
        own = read(path).plan.get("own_build")
    except UserError:
        return None
    if not isinstance(own, dict):
        return None
    try:
        return OwnBuild(**{key: str(own[key]) for key in ("version", "origin", "facts")})
    except KeyError:
        return None


def recorded_companions(path: Path) -> list[dict[str, object]]:
    """The companions of the Plan recorded at ``path`` (as Plan.to_dict writes them); none where unreadable."""
    try:
        companions = read(path).plan.get("companions")
    except UserError:
        return []
    return [c for c in companions if isinstance(c, dict)] if isinstance(companions, list) else []


@dataclass
class State:
    """The runner's view: the last result of each stage, written atomically after every stage."""

    path: Path
    stages: dict[str, StageRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> State:
        """The recorded stages; an unreadable file is a warning, and every stage runs again."""
        state = cls(path)
        if path.is_file():
            try:
                raw = nesting.loads(path.read_text(encoding="utf-8"))
                state.stages = {s: StageRecord.from_dict(r) for s, r in raw.get("stages", {}).items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                console.print(f"[yellow]warning:[/] {path} is unreadable; every stage runs again.")
        return state

    def save(self, plan: Plan) -> None:
        payload = {
            "cell_id": plan.cell_id,
            "plan": plan.to_dict(),
            "stages": {s: r.to_state() for s, r in self.stages.items()},
        }
        write_atomic(self.path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
