"""Each check's seconds, where the time goes: verify's checks timed where they are made (alone, or a group made in
one go, named), in report.json and, with -v, a line per check in the run's output, slowest first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan, with_sbom
from tests.integration.support_conda import assemble_small
from torchbuild.conda.checks.package import check_package
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.results import Artifact, Check, StageResult
from torchbuild.run import runner
from torchbuild.stages import Context
from torchbuild.stages.verify import stage as verify

SITE = "lib/python3.11/site-packages"


def test_every_package_check_has_its_own_seconds(tmp_path: Path) -> None:
    files = {f"{SITE}/tinypkg/__init__.py": b"", f"{SITE}/tinypkg/data.txt": b"0123456789\n"}
    package = assemble_small(tmp_path, files)
    checks = check_package(package)[1:]  # TB100 is the reading itself
    assert len(checks) > 10
    assert all(c.duration is not None and c.duration >= 0 and c.timed_with == "" for c in checks)


def test_verify_times_the_wheel_checks_as_the_group_they_are_read_in(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel = with_sbom(make_wheel(tmp_path / "repair", plan.root.wheel))
    ctx = Context(plan=plan, root=tmp_path, options=RunOptions(), inputs={"repaired_wheel": Artifact.of(wheel)})
    try:
        checks = list(verify.run(ctx).checks)
    except StageFailed as failed:  # a stand-in wheel may fail a check; its checks are timed all the same
        checks = list(failed.checks)
    read_once = [c for c in checks if c.timed_with == "the wheel read once"]
    assert {c.code for c in read_once} >= {"TB201", "TB202", "TB203", "TB206", "TB207"}
    assert len({c.duration for c in read_once}) == 1  # one time, the group's, not one per check
    scripts = next(c for c in checks if c.code == "TB208")
    assert scripts.duration is not None and scripts.timed_with == ""
    written = json.loads((tmp_path / plan.stage_dirs["verify"] / "checks.json").read_text())
    assert {row["timed_with"] for row in written if row["code"] == "TB201"} == {"the wheel read once"}


def test_verbose_shows_each_check_slowest_first_and_a_group_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = torch_plan()
    wheel = make_wheel(tmp_path / "in", plan.root.wheel)
    made = (
        Check("the solve picks this build", "passed", code="TB301", duration=7.25),
        Check("RECORD matches", "passed", code="TB201", duration=2.5, timed_with="the wheel read once"),
        Check("tags", "passed", code="TB202", duration=2.5, timed_with="the wheel read once"),
        Check("the package is the one the Plan names", "passed", code="TB104", duration=0.5),
    )

    def hand_over(name: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: Artifact.of(wheel)} if name else {})

    stand_ins = {"source": hand_over("source_wheel"), "build": hand_over("built_wheel"),
                 "repair": hand_over("repaired_wheel"), "conda": hand_over(""),
                 "verify": lambda _ctx: StageResult(checks=made), "smoke-wheel": hand_over(""),
                 "smoke-conda": hand_over(""), "publish": hand_over("")}  # fmt: skip
    assert runner.run([plan], root=tmp_path, options=RunOptions(verbose=True), stages=stand_ins) == 0
    timed = [line.strip() for line in capsys.readouterr().err.splitlines() if re.match(r"^ +\d+\.\d\ds  ", line)]
    assert timed == [
        "7.25s  TB301 the solve picks this build",
        "2.50s  the wheel read once (TB201, TB202: 2 checks timed together)",
        "0.50s  TB104 the package is the one the Plan names",
    ]
    (cell,) = json.loads((tmp_path / "build" / "report.json").read_text())["cells"]
    verified = next(s for s in cell["stages"] if s["stage"] == "verify")
    assert [c["duration"] for c in verified["checks"]] == [7.25, 2.5, 2.5, 0.5]
    assert [c["timed_with"] for c in verified["checks"]] == ["", "the wheel read once", "the wheel read once", ""]
    junit = (tmp_path / "build" / "junit.xml").read_text()
    assert 'name="the solve picks this build" time="7.250"' in junit
    assert 'name="RECORD matches" time=' not in junit  # a group's seconds are no one check's
    html = (tmp_path / "build" / "report.html").read_text()
    assert "<td>7.2s</td>" in html and "<td>2.5s (all of: the wheel read once)</td>" in html
