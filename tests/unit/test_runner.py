"""The runner's order: smoke beside verify on a host of the cell's platform, one after the other under Wine, and a
failed stage still stopping publish. The stages are stand-ins (the runner's ``stages`` seam); what each records is
what the report shows."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild import runner
from torchbuild.errors import StageFailed, UserError
from torchbuild.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context

WAIT_S = 60.0


def stand_ins(
    plan: Plan, tmp_path: Path, verify: runner.StageFunction, smoke: runner.StageFunction
) -> dict[str, runner.StageFunction]:
    given = Artifact.of(make_wheel(tmp_path / "in", plan.wheel))

    def hand_over(*names: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: given for name in names})

    return {"source": hand_over("source_wheel"), "build": hand_over("built_wheel"),
            "repair": hand_over("repaired_wheel"), "conda": hand_over("conda_package"), "verify": verify,
            "smoke": smoke, "publish": hand_over()}  # fmt: skip


def statuses(root: Path) -> dict[str, tuple[str, str]]:
    (cell,) = json.loads((root / "build" / "report.json").read_text())["cells"]
    return {s["stage"]: (s["status"], s["message"]) for s in cell["stages"]}


def test_on_the_host_smoke_runs_beside_verify_and_a_failed_verify_still_stops_publish(tmp_path: Path) -> None:
    plan = torch_plan()  # linux-64, this host's platform
    smoke_started = threading.Event()

    def verify(_ctx: Context) -> StageResult:
        if not smoke_started.wait(WAIT_S):
            return StageResult(message="smoke did not start while verify ran")
        raise StageFailed("verify", "TB201 wheel RECORD does not match torch/__init__.py")

    def smoke(_ctx: Context) -> StageResult:
        smoke_started.set()
        return StageResult(message="12/14 checks passed")

    code = runner.run([plan], root=tmp_path, options=RunOptions(), stages=stand_ins(plan, tmp_path, verify, smoke))
    assert code == 1
    seen = statuses(tmp_path)
    assert seen["verify"] == ("failed", "verify: TB201 wheel RECORD does not match torch/__init__.py")
    assert seen["smoke"] == ("passed", "12/14 checks passed")  # it ran beside verify: its own result
    assert seen["publish"] == ("not run", "an earlier stage failed")
    assert list(seen) == ["source", "build", "repair", "conda", "verify", "smoke", "publish"]


def test_a_win_64_cell_on_linux_runs_smoke_after_verify(tmp_path: Path) -> None:
    plan = torch_plan(platform="win-64")  # its smoke would run under Wine
    smoke_started = threading.Event()
    seen_during_verify: list[bool] = []

    def verify(_ctx: Context) -> StageResult:
        # Beside each other, smoke would start within this wait; one after the other, it cannot.
        seen_during_verify.append(smoke_started.wait(2.0))
        return StageResult()

    def smoke(_ctx: Context) -> StageResult:
        smoke_started.set()
        return StageResult()

    assert runner.run([plan], root=tmp_path, options=RunOptions(), stages=stand_ins(plan, tmp_path, verify, smoke)) == 0
    assert seen_during_verify == [False]
    assert smoke_started.is_set()


def test_a_stage_beside_one_that_is_not_right_before_it_or_whose_output_it_reads_is_refused() -> None:
    declared = list(runner.pipeline())
    names = [s.name for s in declared]
    smoke = names.index("smoke")
    runner.check_flow(declared)  # as shipped: smoke beside verify
    far = [*declared[:smoke], dataclasses.replace(declared[smoke], beside="conda"), *declared[smoke + 1 :]]
    with pytest.raises(UserError, match="stage 'smoke' runs beside 'conda', which is not the stage right before it"):
        runner.check_flow(far)
    reads_it = dataclasses.replace(declared[smoke], reads=(*declared[smoke].reads, "checks"))
    with pytest.raises(UserError, match="writes what it reads"):
        runner.check_flow([*declared[:smoke], reads_it, *declared[smoke + 1 :]])
