"""The runner's order: the wheel's smoke runs beside conda and verify and the conda package's beside verify, on a
host of the cell's platform and for a win-64 cell under Wine alike; a failed stage stops what has not started yet (and
publish). The stages are stand-ins (the runner's ``stages`` seam); what each records is what the report shows."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed, UserError
from torchbuild.plan import STAGES, Plan
from torchbuild.results import Artifact, StageResult
from torchbuild.run import flow, runner
from torchbuild.stages import Context, Stage

WAIT_S = 60.0


def stand_ins(plan: Plan, tmp_path: Path, **given: runner.StageFunction) -> dict[str, runner.StageFunction]:
    """Every stage handing over what it declares it writes, less those ``given`` (keyed smoke_wheel for
    smoke-wheel)."""
    artifact = Artifact.of(make_wheel(tmp_path / "in", plan.root.wheel))

    def hand_over(*names: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: artifact for name in names})

    functions = {stage.name: hand_over(*stage.writes) for stage in flow.pipeline() if stage.name != "verify"}
    functions["verify"] = lambda _ctx: StageResult()
    return {**functions, **{name.replace("_", "-"): function for name, function in given.items()}}


def statuses(root: Path) -> dict[str, tuple[str, str]]:
    (cell,) = json.loads((root / "build" / "report.json").read_text())["cells"]
    return {s["stage"]: (s["status"], s["message"]) for s in cell["stages"]}


def started(event: threading.Event, message: str = "") -> runner.StageFunction:
    def stage(_ctx: Context) -> StageResult:
        event.set()
        return StageResult(message=message)

    return stage


@pytest.mark.parametrize("platform", ["linux-64", "win-64"])  # this host's platform; a win-64 cell under Wine
def test_the_wheel_smoke_runs_beside_conda_and_the_conda_smoke_beside_a_failing_verify(
    tmp_path: Path, platform: str
) -> None:
    plan = torch_plan(platform=platform)
    wheel_smoke, conda_smoke = threading.Event(), threading.Event()
    conda_package = Artifact.of(make_wheel(tmp_path / "conda", plan.root.wheel))

    def conda(_ctx: Context) -> StageResult:
        if not wheel_smoke.wait(WAIT_S):
            return StageResult(message="smoke-wheel did not start while conda ran")
        return StageResult(outputs={"conda_package": conda_package})

    def verify(_ctx: Context) -> StageResult:
        if not conda_smoke.wait(WAIT_S):
            return StageResult(message="smoke-conda did not start while verify ran")
        raise StageFailed("verify", "TB201 wheel RECORD does not match torch/__init__.py")

    stages = stand_ins(plan, tmp_path, conda=conda, verify=verify, smoke_wheel=started(wheel_smoke, "7/7 checks"),
                       smoke_conda=started(conda_smoke, "6/7 checks"))  # fmt: skip
    assert runner.run([plan], root=tmp_path, options=RunOptions(), stages=stages) == 1
    seen = statuses(tmp_path)
    assert seen["conda"] == ("passed", "")
    assert seen["verify"] == ("failed", "verify: TB201 wheel RECORD does not match torch/__init__.py")
    assert seen["smoke-wheel"] == ("passed", "7/7 checks")
    assert seen["smoke-conda"] == ("passed", "6/7 checks")  # it ran beside verify: its own result
    assert seen["publish"] == ("not run", "an earlier stage failed")
    assert list(seen) == list(STAGES)


def test_a_failed_wheel_smoke_beside_conda_stops_what_has_not_started(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel_smoke_ended = threading.Event()

    def conda(_ctx: Context) -> StageResult:
        wheel_smoke_ended.wait(WAIT_S)
        return StageResult(message="made while smoke-wheel failed")

    def smoke_wheel(_ctx: Context) -> StageResult:
        try:
            raise StageFailed("smoke-wheel", "wheel: import failed")
        finally:
            wheel_smoke_ended.set()

    stages = stand_ins(plan, tmp_path, conda=conda, smoke_wheel=smoke_wheel)
    assert runner.run([plan], root=tmp_path, options=RunOptions(), stages=stages) == 1
    seen = statuses(tmp_path)
    assert seen["conda"] == ("passed", "made while smoke-wheel failed")  # already running: it ends, recorded
    assert seen["smoke-wheel"] == ("failed", "smoke-wheel: wheel: import failed")
    for later in ("verify", "smoke-conda", "publish"):
        assert seen[later] == ("not run", "an earlier stage failed")


def test_the_stages_each_stage_waits_for() -> None:
    declared = flow.pipeline()
    waits = flow.waits_for(declared)
    assert waits["smoke-wheel"] == ("source", "build", "repair")
    assert waits["verify"] == ("source", "build", "repair", "conda")
    assert waits["smoke-conda"] == ("source", "build", "repair", "conda")
    assert waits["publish"] == STAGES[:-1]


def test_a_stage_beside_one_not_before_it_or_whose_output_it_reads_is_refused() -> None:
    declared = list(flow.pipeline())
    names = [s.name for s in declared]
    at = names.index("smoke-conda")
    flow.check_flow(declared)  # as shipped

    def with_smoke_conda(**changes: Any) -> list[Stage]:
        return [*declared[:at], dataclasses.replace(declared[at], **changes), *declared[at + 1 :]]

    with pytest.raises(UserError, match="stage 'smoke-conda' runs beside 'publish', which is not a stage before it"):
        flow.check_flow(with_smoke_conda(beside=("publish",)))
    reads = (
        r"runs beside 'conda' but reads conda_package, conda_package\[\*\], which 'conda' writes"
    )
    with pytest.raises(UserError, match=reads):
        flow.check_flow(with_smoke_conda(beside=("conda",)))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="skipped: no /dev/full (a device that is always full)")
def test_a_full_step_summary_is_said_naming_the_variable_and_file_and_the_run_keeps_its_own_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """/dev/full: every write ends with "No space left on device", as on a runner whose disk is full."""
    plan = torch_plan()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/dev/full")
    assert runner.run([plan], root=tmp_path, options=RunOptions(), stages=stand_ins(plan, tmp_path)) == 0
    shown = " ".join(capsys.readouterr().err.split())
    assert (
        "warning: GITHUB_STEP_SUMMARY=/dev/full: the report was not added to the job's summary (No space left on "
        f"device). The run itself passed (exit 0); its report is {tmp_path / 'build' / 'report.md'}." in shown
    ), shown
