"""The run's own page (build/report.html) of a run whose wheel smoke failed with a Python traceback, as the smoke
stage reports it: the failure first, its traceback once and folded; the checks by stage, folded where all passed;
and a timeline of the stages from their recorded starts, the overlapping ones overlapping. The stages before are
the stand-ins of test_reports.py; the failure is the smoke stage's own, of checks parsed from smoke_checks.py's
result lines with a real traceback."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import time
from html import escape
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.chromium import shown
from tests.unit.test_reports import ROOT, stages_of
from torchbuild.config.options import RunOptions
from torchbuild.results import Check, StageResult
from torchbuild.run import runner
from torchbuild.stages import Context
from torchbuild.stages.smoke import stage as smoke
from torchbuild.stages.smoke.env import Env, parse_results
from torchbuild.stages.smoke.resources import smoke_checks
from torchbuild.stages.smoke.venv import VenvBackend

SCREENSHOT = ROOT / "build" / "test-output" / "report-failed.png"  # build/ is ignored by git


def real_traceback() -> str:
    """What a check process printed when its import failed: a real traceback."""
    said = subprocess.run([sys.executable, "-c", "import torch_that_is_not_there"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert "Traceback (most recent call last)" in said.stderr
    return said.stderr.strip()


def failing_smoke(root: Path, output: str) -> runner.StageFunction:
    """The wheel's smoke: its import check failed with ``output``, the others passed; raised as the stage does."""
    lines = [json.dumps({"check": name, "status": "passed", "message": "ok", "seconds": "0.5"})
             for name in smoke_checks.check_names(())]  # fmt: skip
    lines[0] = json.dumps({"check": smoke_checks.check_names(())[0], "status": "failed", "seconds": "2.0",
                           "message": "ModuleNotFoundError: No module named 'torch_that_is_not_there'",
                           "output": output})  # fmt: skip

    def run(ctx: Context) -> StageResult:
        time.sleep(0.3)  # beside the conda package's smoke, which is still running
        wheel = ctx.inputs["repaired_wheel"].path
        checks = parse_results("wheel", "\n".join(lines), wheel.name)
        env = Env("wheel", root / "env", wheel, root / "smoke-wheel.log")
        raise smoke._failure("smoke-wheel", env, VenvBackend(ctx.plan, sys.executable, wheel), checks)

    return run


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("workspace")
    plan = torch_plan(platform="linux-64", python="3.11")
    output = real_traceback()
    stages = stages_of(plan, root)
    conda_checks = (Check("conda: import", "passed", "torch 2.13.0", duration=1.0),
                    Check("conda: matmul", "passed", "max error 1e-7", duration=0.2))  # fmt: skip

    def smoke_conda(_ctx: Context) -> StageResult:
        time.sleep(0.6)
        return StageResult(checks=conda_checks)

    stages.update({"smoke-wheel": failing_smoke(root, output), "smoke-conda": smoke_conda})
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = runner.run([plan], root=root, options=RunOptions(), stages=stages)
    assert code == 1
    return root, output


def test_the_failure_comes_first_with_its_traceback_once_and_folded(failed_run: tuple[Path, str]) -> None:
    root, output = failed_run
    html = (root / "build" / "report.html").read_text(encoding="utf-8")
    frame = output.splitlines()[1]  # '  File "<string>", line 1, in <module>'
    assert html.count("Traceback (most recent call last)") == 1 and html.count(escape(frame.strip())) == 1
    assert html.index("<h2>Failures</h2>") < html.index("<h2>Matrix</h2>")
    failure = html[html.index("<h2>Failures</h2>"): html.index("<h2>Matrix</h2>")]
    folded = re.findall(r"<details>(.*?)</details>", failure, re.S)
    assert len(folded) == 1 and "Traceback (most recent call last)" in folded[0]  # closed: no "open"
    assert "The environment is kept for debugging" in failure  # the stage's own lines stay in sight


def test_checks_are_grouped_by_stage_and_folded_where_all_passed(failed_run: tuple[Path, str]) -> None:
    root, _ = failed_run
    html = (root / "build" / "report.html").read_text(encoding="utf-8")
    found = re.findall(r'<details class="checks"( open)?><summary>([\w-]+):', html)
    assert {stage: bool(opened) for opened, stage in found} == {"verify": False, "smoke-wheel": True,
                                                                 "smoke-conda": False}  # fmt: skip
    assert "its whole output under Failures" in html


def test_the_timeline_draws_each_stage_from_its_start_and_the_smokes_overlap(failed_run: tuple[Path, str]) -> None:
    root, _ = failed_run
    report = json.loads((root / "build" / "report.json").read_text(encoding="utf-8"))
    (cell,) = report["cells"]
    stages = {s["stage"]: s for s in cell["stages"]}
    assert stages["publish"]["start"] is None and stages["publish"]["status"] == "not run"
    wheel, conda = stages["smoke-wheel"], stages["smoke-conda"]
    assert conda["start"] < wheel["start"] + wheel["duration"]  # they ran beside each other
    assert cell["seconds"] >= conda["start"] + conda["duration"] and cell["started"].endswith("+00:00")
    html = (root / "build" / "report.html").read_text(encoding="utf-8")
    svg = html[html.index('<svg class="timeline"'):]
    svg = svg[: svg.index("</svg>")]
    bars = re.findall(r'<rect class="(\w+)"[^>]*><title>([\w-]+):', svg)
    assert [stage for _, stage in bars] == [s for s in stages if s != "publish"]
    assert dict((stage, cls) for cls, stage in bars)["smoke-wheel"] == "failed"


def test_the_failed_page_loads_in_a_headless_browser(failed_run: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = failed_run
    page = root / "build" / "report.html"
    dom = shown(page, SCREENSHOT, tmp_path, "1400,1400")
    assert dom.count("<rect ") == 7 and "<details open=" not in dom.split("<h2>Matrix</h2>")[0]
