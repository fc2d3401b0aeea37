"""``python pipeline.py smoke --only CELL``: the smoke stages alone, on artifacts another machine built.

The nightly builds a CUDA cell on a hosted runner without a GPU and smoke-tests it on a GPU runner. The GPU job
downloads the build job's ``build/`` (``state.json``, the repaired wheel, the conda package) into its own
``build/`` and runs this. The other stages before publish are replayed from ``build/<cell-id>/state.json``: their
outputs are found below this machine's ``build/<cell-id>`` (the recorded paths are the build machine's) and the
wheel and package the smoke stages read must have the recorded sha256. The smoke stages (smoke-wheel, smoke-conda)
then run for real, always (a smoke result the build machine recorded without a GPU is not reused); publish is left
to the publish job. The report goes to
``build/report.*`` and ``$GITHUB_STEP_SUMMARY`` like any run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.plan import SMOKE_STAGES, STAGES, Plan
from torchbuild.results import Artifact, StageResult, Status, sha256_of
from torchbuild.run import flow, runner, state
from torchbuild.run.records import BadRecord, StageRecord
from torchbuild.stages import Context

LAST_SMOKE = max(STAGES.index(name) for name in SMOKE_STAGES)
BEFORE = tuple(name for name in STAGES[:LAST_SMOKE] if name not in SMOKE_STAGES)  # replayed
AFTER = STAGES[LAST_SMOKE + 1 :]  # left to the publish job


def relocate(recorded: str, work_dir: str, root: Path) -> Path | None:
    """The build machine's path of an output, moved below ``root/work_dir``; None if it was not below it.

    ``D:\\a\\x\\x\\build\\win-64-cpu-py3.11\\repair\\torch.whl`` -> ``root/build/win-64-cpu-py3.11/repair/torch.whl``
    """
    parts = [p for p in re.split(r"[\\/]", recorded) if p]
    anchor = work_dir.split("/")
    for start in range(len(parts) - len(anchor), -1, -1):
        if parts[start : start + len(anchor)] == anchor:
            return root.joinpath(*anchor, *parts[start + len(anchor) :])
    return None


def _comparable(plan: Mapping[str, Any]) -> dict[str, Any]:
    """A Plan's fields that must be the same on both machines: not the channel, nor where the checkout of
    matrix.yaml is (the user test's ``{project}``)."""
    out = {k: v for k, v in plan.items() if k != "channel"}
    if isinstance(test := out.get("user_test"), dict):
        out["user_test"] = {k: v for k, v in test.items() if k != "project"}
    return out


def check_plan(plan: Plan, recorded: Mapping[str, Any], path: Path) -> None:
    """The Plan this machine resolves must be the one the build recorded (same matrix.yaml, same torchbuild)."""
    ours = _comparable(json.loads(json.dumps(plan.to_dict())))
    theirs = _comparable(recorded)
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differ:
        raise UserError(
            f"{path} was recorded for another plan of {plan.cell_id} (different: {', '.join(differ)}). "
            "Run the smoke job on the same commit of matrix.yaml and torchbuild as the build job."
        )


def replayed(raw: state.Recorded, plan: Plan, root: Path, path: Path) -> dict[str, StageRecord]:
    """The recorded stages before publish but the smoke stages, their outputs moved below this machine's work dir
    and checked."""
    records: dict[str, StageRecord] = {}
    for stage in BEFORE:
        found = raw.stages.get(stage)
        try:
            record = StageRecord.from_dict(found) if isinstance(found, dict) else None
        except BadRecord as exc:
            raise UserError(f"{path}: unreadable record of stage '{stage}': {exc}.") from None
        if record is None or record.status not in ("passed", "skipped", "unverified"):
            status = "no record" if record is None else record.status
            done = ", ".join(s for s in STAGES if s in raw.stages) or "none"
            raise UserError(
                f"{path}: the build did not finish stage '{stage}' ({status}; recorded stages: {done}); "
                "nothing to smoke-test. See the build job's report."
            )
        outputs = {}
        for name, artifact in record.outputs.items():
            moved = relocate(str(artifact.path), plan.work_dir, root)
            outputs[name] = replace(artifact, path=moved) if moved is not None else artifact
        records[stage] = replace(record, outputs=outputs)
    final: dict[str, Artifact] = {}
    for record in records.values():
        final.update(record.outputs)
    reads = dict.fromkeys(name for stage in flow.pipeline() if stage.name in SMOKE_STAGES for name in stage.reads)
    for name in reads:
        if name not in final and name.endswith("]"):
            continue  # a companion's artifact (repaired_wheel[torchaudio]): there where the build made one
        if name not in final:
            raise UserError(f"{path}: no '{name}' output recorded before the smoke stages.")
        artifact = final[name]
        if not artifact.path.is_file():
            raise UserError(
                f"{artifact.path}: missing. The build job must upload it with state.json (its build/ directory)."
            )
        if sha256_of(artifact.path) != artifact.sha256:
            raise UserError(f"{artifact.path}: sha256 differs from the one recorded in {path}; download it again.")
    return records


def _replay(record: StageRecord) -> runner.StageFunction:
    def stage(ctx: Context) -> StageResult:
        statuses: dict[str, Status] = {"skipped": "skipped", "unverified": "unverified"}
        status = statuses.get(record.status, "passed")  # an unverified verify stays unverified in this job's report
        return StageResult(status=status, outputs=record.outputs, message=f"from the build job: {record.message}")

    return stage


def _left_to_publish_job(ctx: Context) -> StageResult:
    return StageResult(status="skipped", message="skipped: the publish job publishes every cell at once")


def run(plan: Plan, root: Path, options: RunOptions) -> int:
    """``plan``: the cell as the build job resolved it (pin.pin_to_record)."""
    path = state.path_of(root, plan.work_dir)
    raw = state.read(path)
    check_plan(plan, raw.plan, path)
    records = replayed(raw, plan, root, path)
    stages: dict[str, runner.StageFunction] = {name: _replay(record) for name, record in records.items()}
    stages.update({name: _left_to_publish_job for name in AFTER})
    # force: a smoke result recorded on the build machine (no GPU there) must not be reused.
    return runner.run([plan], root, replace(options, force=True), stages=stages)
