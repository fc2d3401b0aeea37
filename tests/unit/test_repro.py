"""A rebuild of the same inputs that gives other bytes is named, member by member, in the stage's message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.results import Artifact, StageResult
from torchbuild.run import runner
from torchbuild.stages import Context


def test_a_rebuild_that_differs_names_the_members_that_changed(tmp_path: Path) -> None:
    plan = torch_plan()
    given = make_wheel(tmp_path / "in", plan.root.wheel)

    def clock_stamping_repair(ctx: Context) -> StageResult:
        """A fake repair that is not reproducible on purpose: it writes the clock into a member."""
        out = ctx.stage_dir("repair")
        files = {"torch/__init__.py": b"", "torch/stamp.txt": str(time.time_ns()).encode()}
        return StageResult(outputs={"repaired_wheel": Artifact.of(make_wheel(out, plan.root.wheel, files))})

    def hand_over(name: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: Artifact.of(given)} if name else {})

    stand_ins = {"source": hand_over("source_wheel"), "build": hand_over("built_wheel"),
                 "repair": clock_stamping_repair, "conda": hand_over(""), "verify": hand_over(""),
                 "smoke-wheel": hand_over(""), "smoke-conda": hand_over(""), "publish": hand_over("")}  # fmt: skip
    for _ in range(2):
        assert runner.run([plan], root=tmp_path, options=RunOptions(force=True), stages=stand_ins) == 0
    (cell,) = json.loads((tmp_path / "build" / "report.json").read_text())["cells"]
    message = next(s["message"] for s in cell["stages"] if s["stage"] == "repair")
    assert message.startswith(f"not reproducible: {plan.root.wheel} differs from the last build of the same inputs: ")
    assert "torch/stamp.txt (crc" in message and "torch-2.13.0+cpu.dist-info/RECORD (crc" in message


def test_a_source_date_epoch_that_is_no_time_is_refused_before_anything_runs(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--cuda", "cpu", "--py", "3.11",
         "--matrix", str(ROOT / "matrix.yaml")],
        cwd=tmp_path, capture_output=True, text=True, check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": "yesterday", "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "SOURCE_DATE_EPOCH='yesterday' is not a number of seconds since 1970-01-01." in result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("epoch", ["0", "-1", "315532799", "4354819199", "99999999999999999999"])
def test_a_source_date_epoch_no_archive_can_carry_is_refused_before_anything_runs(epoch: str, tmp_path: Path) -> None:
    # Before 1980 or after 2107, a zip cannot hold the time: the conda stage panicked, repair raised struct.error.
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "--cuda", "cpu", "--py", "3.11",
         "--matrix", str(ROOT / "matrix.yaml")],
        cwd=tmp_path, capture_output=True, text=True, check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": epoch, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 2
    message = " ".join(result.stderr.split())
    assert f"SOURCE_DATE_EPOCH={epoch} is outside the times a wheel (a zip) can carry: give one from" in message
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_a_rerun_reads_no_archive_of_a_stage_that_copies_its_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish copies the packages it reads: a rerun of the same inputs cannot make other bytes, so the runner does
    not read the published archives first (a wheel's directory of 12,000 members costs a rerun a fifth of a second)
    while it still does so for the stages that make archives."""
    plan = torch_plan()
    given = make_wheel(tmp_path / "in", plan.root.wheel)
    published = tmp_path / "channel-copy" / plan.root.wheel

    def copy_publish(_ctx: Context) -> StageResult:
        published.parent.mkdir(exist_ok=True)
        published.write_bytes(given.read_bytes())
        return StageResult(outputs={"published_wheel": Artifact.of(published)})

    def hand_over(name: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: Artifact.of(given)} if name else {})

    stand_ins = {"source": hand_over("source_wheel"), "build": hand_over("built_wheel"),
                 "repair": hand_over("repaired_wheel"), "conda": hand_over(""), "verify": hand_over(""),
                 "smoke-wheel": hand_over(""), "smoke-conda": hand_over(""), "publish": copy_publish}  # fmt: skip
    read: list[str] = []
    real = runner.repro.fingerprint
    monkeypatch.setattr(runner.repro, "fingerprint", lambda path: read.append(path.parent.name) or real(path))
    for options in (RunOptions(), RunOptions(), RunOptions(force=True)):
        assert runner.run([plan], root=tmp_path, options=options, stages=stand_ins) == 0
    assert "channel-copy" not in read
    assert read.count("in") == 3  # --force: source, build and repair are fingerprinted before they run again
