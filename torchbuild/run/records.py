"""What a run recorded of each stage of each cell: written to ``build/<cell-id>/state.json`` by the runner, read by
the report, the rerun rule and the smoke command."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbuild.plan import Plan
from torchbuild.results import Artifact, Check

PASSING = ("passed", "skipped", "cached", "unverified")  # nothing failed: later stages run
EXIT_UNVERIFIED = 3  # the exit status of a run where no cell failed and a cell is unverified


@dataclass
class StageRecord:
    stage: str
    status: str  # passed | failed | skipped | cached | not run | unverified
    duration: float = 0.0
    message: str = ""
    key: str = ""
    outputs: dict[str, Artifact] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    # st_mtime_ns of each output when it was recorded: a rerun trusts the recorded sha256 only while the file's
    # size and mtime are unchanged (state.json only; the reports leave it out).
    mtimes: dict[str, int] = field(default_factory=dict)
    ran_on: str = ""  # where its checks ran ("under Wine 8.0, CPython 3.11.9 embeddable"); "" when not said
    # seconds from the cell's start to this stage's (its place on the page's timeline: stages run beside each other);
    # None where it did not run, and in the records of torchbuild versions before it was kept
    start: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status,
            "duration": round(self.duration, 3),
            "message": self.message,
            "key": self.key,
            "outputs": {name: a.to_dict() for name, a in self.outputs.items()},
            "checks": [c.to_dict() for c in self.checks],
            "ran_on": self.ran_on,
            "start": None if self.start is None else round(self.start, 3),
        }

    def to_state(self) -> dict[str, Any]:
        return {**self.to_dict(), "mtimes": dict(self.mtimes)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StageRecord:
        """The record ``raw`` (a stage of state.json); BadRecord when it is not of the shape ``to_state`` writes (a
        file from another torchbuild version, or edited), so that the reader can name the file."""
        try:
            record = cls(
                stage=_text(raw["stage"]),
                status=_text(raw["status"]),
                duration=float(raw.get("duration", 0.0)),
                message=_text(raw.get("message", "")),
                key=_text(raw.get("key", "")),
                outputs={
                    _text(name): Artifact(path=Path(_text(a["path"])), sha256=_text(a["sha256"]), size=int(a["size"]))
                    for name, a in raw.get("outputs", {}).items()
                },
                checks=[Check(**c) for c in raw.get("checks", [])],
                mtimes={str(k): int(v) for k, v in (raw.get("mtimes") or {}).items()},
                ran_on=str(raw.get("ran_on", "")),
                start=None if raw.get("start") is None else float(raw["start"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise BadRecord(f"a stage record lacks a field or has one of the wrong type ({problem})") from None
        if record.status not in STATUSES:
            valid = ", ".join(STATUSES)
            raise BadRecord(f"stage {record.stage!r} has the status {record.status!r}, not one of {valid}")
        return record


class BadRecord(ValueError):
    """A stage record of the wrong shape."""


STATUSES = ("passed", "failed", "skipped", "cached", "not run", "unverified")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


@dataclass
class CellRun:
    plan: Plan
    records: list[StageRecord] = field(default_factory=list)
    started: str = ""  # when the cell's run started, ISO 8601 in UTC (a history orders its nights by it)
    seconds: float | None = None  # the cell's run from its start to its last stage's end (its stages overlap)

    @property
    def ok(self) -> bool:
        """No stage failed (the cell may still be unverified: ``status``)."""
        return all(r.status in PASSING for r in self.records)

    @property
    def status(self) -> str:
        """failed, unverified (nothing failed, a check that guards the user could not run) or passed."""
        if not self.ok:
            return "failed"
        return "unverified" if self.unverified else "passed"

    @property
    def unverified(self) -> list[StageRecord]:
        return [r for r in self.records if r.status == "unverified"]

    @property
    def artifacts(self) -> dict[str, Artifact]:
        found: dict[str, Artifact] = {}
        for record in self.records:
            found.update(record.outputs)
        return found
