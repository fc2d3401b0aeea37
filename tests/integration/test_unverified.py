"""The verify stage's solve without stored repodata goes to the live channel; where that cannot be reached the
check is not run, and the cell is published "unverified": report.json, report.md, junit.xml and the terminal's last
lines say so, and the run exits 3 (EXIT_UNVERIFIED), never a plain pass.

The channel is made unreachable for real: its URL names a port of this host where nothing listens, and py-rattler's
gateway gets "connection refused" (conda-forge itself is unreachable from some hosts, reachable from others). The
conda package is the conda stage's real one, of a small wheel; the stages before it hand their artifacts over, and
the smoke and publish stages are fakes (a small wheel has no torch to smoke-test), named so below."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.builders import source_info, torch_plan
from tests.integration.support_conda import tiny_torch_wheel
from torchbuild.conda import solve as solver
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import CODES, Artifact, StageResult
from torchbuild.run import flow, runner
from torchbuild.run.records import EXIT_UNVERIFIED
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.verify import stage as verify

UNREACHABLE = "https://127.0.0.1:9/conda-forge"  # port 9 (discard): nothing listens there
FIX = "give --repodata DIR (or TORCHBUILD_REPODATA=DIR) with stored conda-forge repodata to solve offline"


@pytest.fixture
def no_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(solver.CHANNEL_URLS, "conda-forge", UNREACHABLE)
    monkeypatch.delenv("TORCHBUILD_REPODATA", raising=False)


def _made(root: Path, plan: Plan) -> dict[str, Artifact]:
    """The artifacts of the stages up to conda: a small wheel, and the conda stage's real package of it."""
    wheel = Artifact.of(tiny_torch_wheel(root / "in", plan, ("filelock",)))
    inputs = {"repaired_wheel": wheel, "source_info": source_info(root / "source", wheel.path)}
    options = RunOptions(compression_level=3, cache_dir=root / "cache")
    done = conda.run(Context(plan=plan, root=root / "work", options=options, inputs=inputs))
    return {**inputs, "conda_package": done.outputs["conda_package"]}


def test_verify_without_repodata_and_no_channel_is_unverified(tmp_path: Path, no_channel: None) -> None:
    plan = torch_plan()
    made = _made(tmp_path, plan)
    options = RunOptions(cache_dir=tmp_path / "cache")  # no repodata: the live channel
    result = verify.run(Context(plan=plan, root=tmp_path / "work", options=options, inputs=made))
    (solve,) = [c for c in result.checks if c.code == "TB301"]
    assert solve.status == "unverified"
    assert solve.message.startswith(f"not run: {UNREACHABLE} could not be reached (")
    assert solve.message.endswith(FIX)
    assert result.status == "unverified"
    assert f"1 unverified\n  TB301 not run: {UNREACHABLE}" in result.message


def test_a_run_with_an_unverified_cell_says_so_in_every_report_and_exits_3(
    tmp_path: Path, no_channel: None, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = torch_plan()
    made = _made(tmp_path, plan)

    def hand_over(names: tuple[str, ...]) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: made[name] for name in names if name in made})

    stages = {stage.name: hand_over(stage.writes) for stage in flow.pipeline() if stage.name != "verify"}
    for fake in ("smoke-wheel", "smoke-conda", "publish"):  # fakes: a small wheel has no torch to smoke or ship
        stages[fake] = lambda _ctx: StageResult(message="fake: passed")
    options = RunOptions(cache_dir=tmp_path / "cache")
    code = runner.run([plan], root=tmp_path, options=options, stages=stages)

    assert code == EXIT_UNVERIFIED == 3
    build = tmp_path / "build"
    report = json.loads((build / "report.json").read_text(encoding="utf-8"))
    (cell,) = report["cells"]
    assert (report["status"], report["ok"], cell["status"], cell["ok"]) == ("unverified", False, "unverified", False)
    stages_seen = {s["stage"]: s["status"] for s in cell["stages"]}
    assert stages_seen["verify"] == "unverified" and stages_seen["publish"] == "passed"
    markdown = (build / "report.md").read_text(encoding="utf-8")
    assert f"| `{plan.cell_id}` | {plan.version} | ⚠️ unverified |" in markdown
    assert "### Unverified (published, but a check could not run)" in markdown
    assert f"TB301 not run: {UNREACHABLE} could not be reached" in markdown
    junit = ET.parse(build / "junit.xml").getroot()
    skipped = {case.get("name"): case.find("skipped") for case in junit.iter("testcase")}
    assert skipped["verify"] is not None and skipped["verify"].get("type") == "unverified"
    solve_case = skipped[CODES["TB301"]]
    assert solve_case is not None and solve_case.get("type") == "unverified"
    said = capsys.readouterr()
    # the run's results are on stdout (the install lines follow the verdict)
    last = [line for line in said.out.splitlines() if line.startswith("unverified")]
    assert last[0] == f"unverified {plan.cell_id} / verify: TB301 " + next(
        c["message"] for s in cell["stages"] for c in s["checks"] if c["code"] == "TB301"
    )
    assert last[1].startswith("unverified: 1 of 1 cells published unverified (a check could not run: see the lines")
