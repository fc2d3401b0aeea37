"""torchbuild/data/ci_estimates.yaml, parsed once: runner hours per cell kind, the runners' minute multipliers and
the hosted job limit (``pipeline.py matrix --estimate`` adds them up in commands/estimate.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles

DATA = "ci_estimates.yaml"


@dataclass(frozen=True)
class Runner:
    minute_multiplier: int
    billed: bool


@dataclass(frozen=True)
class Table:
    source: str
    hosted_job_limit_hours: float
    runners: Mapping[str, Runner]
    build_hours: Mapping[tuple[str, str], tuple[float, bool]]  # (platform, cpu|cuda) -> (hours, uncertain)
    smoke_hours: float
    overhead_jobs: int
    overhead_hours_per_job: float


def _parse_data(raw: Mapping[str, Any]) -> Table:
    return parse_table(raw, DATA)


def load_table() -> Table:
    return datafiles.table(DATA, _parse_data)


def parse_table(raw: Mapping[str, Any], path: str) -> Table:
    try:
        runners = {
            str(name): Runner(minute_multiplier=int(r["minute_multiplier"]), billed=bool(r["billed"]))
            for name, r in raw["runners"].items()
        }
        build_hours = {
            (str(row["platform"]), str(row["accelerator"])): (float(row["hours"]), bool(row.get("uncertain", False)))
            for row in raw["build_hours"]
        }
        return Table(
            source=str(raw["source"]),
            hosted_job_limit_hours=float(raw["hosted_job_limit_hours"]),
            runners=runners,
            build_hours=build_hours,
            smoke_hours=float(raw["smoke_hours"]),
            overhead_jobs=int(raw["overhead_jobs"]),
            overhead_hours_per_job=float(raw["overhead_hours_per_job"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: malformed estimate table ({type(exc).__name__}: {exc}).") from None
