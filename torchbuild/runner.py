"""Runs the stages of each cell in order, records them in ``build/<cell-id>/state.json``, resumes, reports.

A stage is skipped on a rerun when its recorded input key (the Plan, the run options that shape its output and
the sha256 of every artifact it reads) is unchanged and its recorded outputs are still on disk with the same
sha256. ``--force`` reruns everything. A failed stage stops its cell; later stages are reported as not run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbuild import report
from torchbuild.console import console, step_done, step_start
from torchbuild.errors import StageFailed, UserError
from torchbuild.files import write_atomic
from torchbuild.plan import STAGES, Plan
from torchbuild.stages import Artifact, Check, Context, RunOptions, StageResult

StageFunction = Callable[[Context], StageResult]
# The run options that shape each stage's output (the rest, like --force or the cache, do not).
STAGE_OPTIONS = {
    "source": ("wheel", "source_dir", "git_ref", "git_url", "source_kind"),
    "build": ("source_kind",),
    "conda": ("conda_format", "compression_level", "compression_threads"),
    "verify": ("repodata",),
}
# Publishing is idempotent and cheap when nothing changed, and the channel may have changed since: always check it.
ALWAYS_RUN = ("publish",)
# A checkout can change without its path changing: the source stage re-reads it (commit, local edits) every run, and
# the build reruns only when what it wrote (checkout.json) changed.
ALWAYS_RUN_WITH_SOURCE = ("source",)
# Re-resolves a Plan for another torch release (prebuilt "latest" that has no wheel for the newest release).
Repin = Callable[[Plan, str], Plan]


def stage_function(stage: str) -> StageFunction:
    module = importlib.import_module(f"torchbuild.stages.{stage}")
    function: StageFunction = module.run
    return function


@dataclass
class StageRecord:
    stage: str
    status: str  # passed | failed | skipped | cached | not run
    duration: float = 0.0
    message: str = ""
    key: str = ""
    outputs: dict[str, Artifact] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": self.status,
            "duration": round(self.duration, 3),
            "message": self.message,
            "key": self.key,
            "outputs": {name: a.to_dict() for name, a in self.outputs.items()},
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StageRecord:
        return cls(
            stage=raw["stage"],
            status=raw["status"],
            duration=float(raw.get("duration", 0.0)),
            message=raw.get("message", ""),
            key=raw.get("key", ""),
            outputs={
                name: Artifact(path=Path(a["path"]), sha256=a["sha256"], size=int(a["size"]))
                for name, a in raw.get("outputs", {}).items()
            },
            checks=[Check(**c) for c in raw.get("checks", [])],
        )


@dataclass
class CellRun:
    plan: Plan
    records: list[StageRecord] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status in ("passed", "skipped", "cached") for r in self.records)

    @property
    def artifacts(self) -> dict[str, Artifact]:
        found: dict[str, Artifact] = {}
        for record in self.records:
            found.update(record.outputs)
        return found


class State:
    """``build/<cell-id>/state.json``: the last result of each stage, written atomically after every stage."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stages: dict[str, StageRecord] = {}
        if path.is_file():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                self.stages = {s: StageRecord.from_dict(r) for s, r in raw.get("stages", {}).items()}
            except (ValueError, KeyError, TypeError):
                console.print(f"[yellow]warning:[/] {path} is unreadable; every stage runs again.")

    def save(self, plan: Plan) -> None:
        payload = {
            "cell_id": plan.cell_id,
            "plan": plan.to_dict(),
            "stages": {s: r.to_dict() for s, r in self.stages.items()},
        }
        write_atomic(self.path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def input_key(stage: str, plan: Plan, options: RunOptions, inputs: Mapping[str, Artifact]) -> str:
    shaping = {name: str(getattr(options, name)) for name in STAGE_OPTIONS.get(stage, ())}
    payload = {
        "stage": stage,
        "plan": {k: v for k, v in plan.to_dict().items() if k != "channel"},
        "options": shaping,
        "inputs": {name: a.sha256 for name, a in sorted(inputs.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _intact(record: StageRecord) -> bool:
    for artifact in record.outputs.values():
        path = artifact.path
        if not path.is_file() or path.stat().st_size != artifact.size:
            return False
    return True


def run_cell(
    plan: Plan,
    root: Path,
    options: RunOptions,
    stages: Mapping[str, StageFunction] | None = None,
) -> CellRun:
    state = State(root / plan.work_dir / "state.json")
    cell = CellRun(plan=plan)
    inputs: dict[str, Artifact] = {}
    failed = False
    console.rule(f"[bold]{plan.cell_id}[/]  torch {plan.version}  ({plan.conda.filename})")
    for stage in STAGES:
        if failed:
            cell.records.append(StageRecord(stage=stage, status="not run", message="an earlier stage failed"))
            continue
        key = input_key(stage, plan, options, inputs)
        previous = state.stages.get(stage)
        if (
            not options.force
            and stage not in ALWAYS_RUN
            and not (stage in ALWAYS_RUN_WITH_SOURCE and (options.source_dir or options.git_ref))
            and previous is not None
            and previous.key == key
            and previous.status in ("passed", "skipped")
            and _intact(previous)
        ):
            record = dataclasses.replace(previous, status="cached", duration=0.0)
            record.message = f"unchanged since last run ({previous.status})"
            cell.records.append(record)
            inputs.update(previous.outputs)
            step_done(stage, record.status, 0.0, record.message)
            continue
        function = (stages or {}).get(stage) or stage_function(stage)
        ctx = Context(plan=plan, root=root, options=options, inputs=dict(inputs))
        step_start(stage)
        started = time.monotonic()
        try:
            result = function(ctx)
        except UserError as exc:
            message = str(exc) if isinstance(exc, StageFailed) else f"{stage}: {exc}"
            checks = list(exc.checks) if isinstance(exc, StageFailed) else []
            record = StageRecord(
                stage=stage, status="failed", duration=time.monotonic() - started, message=message, key=key
            )
            record.checks = checks
            failed = True
        else:
            record = StageRecord(
                stage=stage,
                status=result.status,
                duration=time.monotonic() - started,
                message=result.message,
                key=key,
                outputs=dict(result.outputs),
                checks=list(result.checks),
            )
            failed = result.status == "failed"
            inputs.update(result.outputs)
        cell.records.append(record)
        if record.status != "failed":
            state.stages[stage] = record
        else:
            state.stages.pop(stage, None)
        state.save(plan)
        step_done(stage, record.status, record.duration, record.message, record.outputs)
    return cell


def run(
    plans: Sequence[Plan],
    root: Path,
    options: RunOptions,
    repin: Repin | None = None,
    stages: Mapping[str, StageFunction] | None = None,
) -> int:
    """Run every plan; write the reports; return the exit code (0 only when every cell passed)."""
    cells = []
    for plan in plans:
        plan = _pin_prebuilt(plan, options, repin)
        cells.append(run_cell(plan, root, options, stages))
    paths = report.write(cells, root / "build")
    report.print_summary(cells, paths)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(paths.markdown.read_text(encoding="utf-8"))
    return 0 if all(c.ok for c in cells) else 1


def _wheel_release(wheel: Path) -> str | None:
    """The release of a torch wheel file name (2.13.0 for torch-2.13.0+cpu-...); None if it is not one."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        return None  # the source stage names the problem
    return version.public


def _pin_prebuilt(plan: Plan, options: RunOptions, repin: Repin | None) -> Plan:
    """In prebuilt mode, 'latest' means the newest release for which a prebuilt wheel exists (or --wheel's)."""
    if plan.torch_requested != "latest" or repin is None:
        return plan
    if options.source_dir is not None or options.git_ref is not None:
        return plan  # compiling: the Plan's release is what the checkout must be
    if options.wheel is not None:
        version = _wheel_release(options.wheel)
        return plan if version in (None, plan.torch) else repin(plan, version)
    from torchbuild.compat import load
    from torchbuild.stages import source

    candidates = [r.version for r in reversed(load().releases) if r.supports(plan.platform, plan.cuda, plan.python)]
    found = source.newest_available(plan, candidates)
    if found is None:
        raise UserError(
            f"{plan.cell_id}: no prebuilt torch wheel +{plan.local_version} for {plan.platform} and Python "
            f"{plan.python} in the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS). "
            "Give one with --wheel PATH."
        )
    if found != plan.torch:
        console.print(
            f"{plan.cell_id}: no prebuilt wheel of torch {plan.torch}+{plan.local_version}; "
            f"the newest with one is [bold]{found}[/], which this run uses."
        )
        return repin(plan, found)
    return plan
