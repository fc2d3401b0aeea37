"""Made-up nights of a nightly, each a real ``report.json``: cells of real Plans, with stage records as the runner
makes them (overlapping stages with their start times), written by the pipeline's own report writer
(``report.write``), as a run leaves them in its ``build/``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torchbuild.plan import Plan
from torchbuild.results import Artifact, Check
from torchbuild.run import report
from torchbuild.run.records import CellRun, StageRecord

# (start, seconds) of each stage on a host of the cell's platform: the smokes run beside conda and verify
TIMES = {"source": (0.0, 20.0), "build": (20.0, 0.0), "repair": (20.0, 40.0), "conda": (60.0, 30.0),
         "verify": (90.0, 25.0), "smoke-wheel": (60.0, 70.0), "smoke-conda": (90.0, 60.0),
         "publish": (150.0, 2.0)}  # fmt: skip
TRACEBACK = (
    "ImportError: DLL load failed while importing _C: The specified module could not be found.\n"
    "Traceback (most recent call last):\n"
    '  File "<string>", line 1, in <module>\n'
    '  File "C:\\\\env\\\\Lib\\\\site-packages\\\\torch\\\\__init__.py", line 141, in <module>\n'
    "    raise err\n"
    "OSError: [WinError 126] Error loading c10.dll or one of its dependencies."
)


@dataclass(frozen=True)
class Outcome:
    """How a cell went on a night: the stage that failed ("" none), its wheel's size and how slow it ran."""

    failed: str = ""
    wheel_mb: float = 200.0
    slower: float = 1.0  # every stage's time multiplied by it


def _artifact(path: str, size: int) -> Artifact:
    return Artifact(Path(path), hashlib.sha256(f"{path} {size}".encode()).hexdigest(), size)


def records(plan: Plan, outcome: Outcome) -> list[StageRecord]:
    """The cell's stage records: each stage's start and time from TIMES, a failure where ``outcome`` says."""
    made: list[StageRecord] = []
    failed = False
    for stage, (start, seconds) in TIMES.items():
        if failed and stage == "publish":
            made.append(StageRecord(stage, "not run", message="an earlier stage failed"))
            continue
        status, message = ("skipped", "prebuilt wheel") if stage == "build" else ("passed", "")
        record = StageRecord(stage, status, seconds * outcome.slower, message, start=start * outcome.slower)
        if stage == "repair":
            record.outputs["repaired_wheel"] = _artifact(f"build/{plan.cell_id}/repair/{plan.root.wheel}",
                                                         int(outcome.wheel_mb * 1e6))  # fmt: skip
        if stage == "conda":
            record.outputs["conda_package"] = _artifact(f"build/{plan.cell_id}/conda/{plan.root.conda.filename}",
                                                        int(outcome.wheel_mb * 0.7e6))  # fmt: skip
        if stage == outcome.failed:
            check = Check("wheel: import", "failed", TRACEBACK, file=plan.root.wheel)
            record.status, record.checks = "failed", [check]
            record.message = f"wheel: import failed in a fresh venv with {plan.root.wheel}: {TRACEBACK}"
            failed = True
        made.append(record)
    return made


def write_night(history: Path, name: str, started: str, outcomes: Sequence[tuple[Plan, Outcome]]) -> Path:
    """The night ``name`` in ``history``: its folder with the build/ reports of its cells; returns its report.json."""
    build = history / name
    cells = [CellRun(plan, records(plan, outcome), started=started, seconds=152.0 * outcome.slower)
             for plan, outcome in outcomes]  # fmt: skip
    return report.write(cells, build).json
