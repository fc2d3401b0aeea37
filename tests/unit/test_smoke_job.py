"""`python pipeline.py smoke --only CELL`: the smoke stage alone on a build/ that another machine recorded.

The recorded build is written with the runner's own State; its wheel and conda package are fakes (a few bytes):
this Linux host cannot smoke-test a win-64 cell, so the real smoke stage reports itself skipped before it reads
them, and what is tested is the replay: paths moved from the build machine, sha256 checked, reports written.
"""

from __future__ import annotations

import json
from pathlib import Path, PureWindowsPath

import pytest

from tests.conftest import ROOT
from torchbuild.commands import cli, selection
from torchbuild.commands import smoke as smoke_job
from torchbuild.config.matrix import load
from torchbuild.plan import STAGES, Plan
from torchbuild.results import Artifact
from torchbuild.run import runner
from torchbuild.run.records import StageRecord

CELL = "win-64-cpu-py3.11"
BUILD_ROOT = PureWindowsPath(r"D:\a\torchbuild\torchbuild")  # where a windows-2022 runner checks out


def plan_of(cell_id: str) -> Plan:
    matrix = load(ROOT / "matrix.yaml")
    (cell,) = [c for c in matrix.cells() if c.id == cell_id]
    (plan,) = selection.resolve_all(matrix, [cell])
    return plan


def record_build(root: Path, plan: Plan, upto: str = "verify", wheel: bytes = b"wheel") -> dict[str, Path]:
    """build/<cell>/state.json as the build machine left it, and the files its upload brought here."""
    files = {
        "wheel": root / plan.work_dir / "repair" / plan.root.wheel,
        "conda": root / plan.work_dir / "conda" / plan.root.conda.filename,
    }
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(wheel if name == "wheel" else b"conda package")
    state = runner.State(root / plan.work_dir / "state.json")
    outputs = {"repair": "wheel", "conda": "conda"}
    for stage in STAGES[: STAGES.index(upto) + 1]:
        record = StageRecord(stage=stage, status="passed", duration=60.0, message=f"{stage} done")
        if stage in outputs:
            name = outputs[stage]
            local = Artifact.of(files[name])
            windows_path = BUILD_ROOT.joinpath(*files[name].relative_to(root).parts)
            declared = {"wheel": "repaired_wheel", "conda": "conda_package"}[name]
            record.outputs = {declared: Artifact(path=Path(str(windows_path)), sha256=local.sha256, size=local.size)}
        state.stages[stage] = record
    state.save(plan)
    if wheel != b"wheel":  # the upload changed on the way
        files["wheel"].write_bytes(b"wheel")
    return files


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_relocate_moves_a_recorded_path_below_this_machines_build_dir(tmp_path: Path) -> None:
    work = f"build/{CELL}"
    moved = smoke_job.relocate(rf"D:\a\x\x\build\{CELL}\repair\torch.whl", work, tmp_path)
    assert moved == tmp_path / "build" / CELL / "repair" / "torch.whl"
    assert smoke_job.relocate(f"/home/u/tb/build/{CELL}/conda/p.conda", work, tmp_path) == (
        tmp_path / "build" / CELL / "conda" / "p.conda"
    )
    assert smoke_job.relocate("/home/u/.cache/torchbuild/ab/torch.whl", work, tmp_path) is None


def test_smoke_replays_the_build_and_runs_only_the_smoke_stages(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(here / "no-wine-here"))  # the stand-in artifacts cannot run under Wine
    plan = plan_of(CELL)
    files = record_build(here, plan)
    assert cli.main(["smoke", "--only", CELL]) == 0
    report = json.loads((here / "build" / "report.json").read_text())
    (cell,) = report["cells"]
    stages = {s["stage"]: s for s in cell["stages"]}
    assert [s["stage"] for s in cell["stages"]] == list(STAGES)
    for stage in ("source", "build", "repair", "conda", "verify"):
        assert stages[stage]["status"] == "passed"
        assert stages[stage]["message"] == f"from the build job: {stage} done"
    for smoke in ("smoke-wheel", "smoke-conda"):
        assert stages[smoke]["status"] == "skipped"
        assert stages[smoke]["message"] == "skipped: needs a win-64 host or Wine (apt-get install wine64)"
    assert stages["publish"]["message"] == "skipped: the publish job publishes every cell at once"
    assert cell["artifacts"]["repaired_wheel"]["path"] == str(files["wheel"])
    state = json.loads((here / plan.work_dir / "state.json").read_text())
    assert state["stages"]["smoke-wheel"]["status"] == state["stages"]["smoke-conda"]["status"] == "skipped"


def test_a_changed_download_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = record_build(here, plan_of(CELL), wheel=b"the wheel the build made")
    assert cli.main(["smoke", "--only", CELL]) == 2
    err = capsys.readouterr().err
    assert f"{files['wheel']}: sha256 differs from the one recorded in" in err
    assert not (here / "build" / "report.json").exists()


def test_an_unfinished_build_is_named(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record_build(here, plan_of(CELL), upto="repair")
    assert cli.main(["smoke", "--only", CELL]) == 2
    err = capsys.readouterr().err
    assert "the build did not finish stage 'conda' (no record; recorded stages: source, build, repair)" in err


def test_no_download_and_another_plan_are_named(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["smoke", "--only", CELL]) == 2
    assert "state.json: no such file. Download the build job's artifact" in capsys.readouterr().err
    record_build(here, plan_of("win-64-cpu-py3.12"))
    recorded = here / "build" / "win-64-cpu-py3.12"
    recorded.rename(here / "build" / CELL)
    assert cli.main(["smoke", "--only", CELL]) == 2
    err = capsys.readouterr().err
    assert "was recorded for another plan of win-64-cpu-py3.11 (different: cell_id," in err


def test_smoke_takes_one_cell(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["smoke", "--platform", "win-64", "--cuda", "cpu"]) == 2
    assert "smoke takes one cell (4 selected): give --only CELL_ID" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["outputs"].update(repaired_wheel=[]), "unreadable record of stage 'repair': a stage record lacks"),
        (lambda r: r["outputs"]["repaired_wheel"].update(size="big"), "unreadable record of stage 'repair'"),
        (lambda r: r["outputs"]["repaired_wheel"].update(path=7), "unreadable record of stage 'repair'"),
        (lambda r: r.update(outputs=["wheel"]), "unreadable record of stage 'repair'"),
        (lambda r: r.update(checks=[{"nom": "x"}]), "unreadable record of stage 'repair'"),
        (lambda r: r.update(status="done"), "stage 'repair' has the status 'done', not one of passed,"),
        (lambda r: r.pop("stage"), "unreadable record of stage 'repair'"),
    ],
)
def test_a_state_file_of_the_wrong_shape_is_named(
    change: object, message: str, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Valid JSON, but not what the runner writes (another torchbuild version, an edit): a message, not a traceback.
    plan = plan_of(CELL)
    record_build(here, plan)
    path = here / plan.work_dir / "state.json"
    state = json.loads(path.read_text())
    change(state["stages"]["repair"])  # type: ignore[operator]
    path.write_text(json.dumps(state))
    assert cli.main(["smoke", "--only", CELL]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: " in err and message in err
    assert not (here / "build" / "report.json").exists()
