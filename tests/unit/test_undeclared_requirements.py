"""What torch imports without declaring it (packaging.yaml undeclared_requirements): torch 2.6-2.9 import
importlib_metadata on Python < 3.10 (pytorch/pytorch#163946), so ``torchrun`` fails in a fresh environment of a cp39
wheel. The Plan names the line, the repair adds it to the wheel's Requires-Dist, and the conda package depends on it
as on every other requirement. The wheels here are small real wheels built in the test (stand-ins named torch)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, source_info, torch_plan
from tests.conftest import ROOT
from torchbuild.conda.requirements import wheel_requires
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.stages import Context
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.repair import torch_wheel
from torchbuild.wheel import checks, wheelfile

LINE = 'importlib-metadata; python_version < "3.10"'


@pytest.mark.parametrize("platform", ["win-64", "linux-64"])
@pytest.mark.parametrize(("torch", "python", "added"), [
    ("2.8.0", "3.9", [LINE]),
    ("2.6.0", "3.9", [LINE]),
    ("2.8.0", "3.10", []),  # importlib.metadata has entry_points(group=...) from 3.10: the stdlib serves
    ("2.5.1", "3.9", []),  # before the guarded import
])  # fmt: skip
def test_the_plan_adds_the_line_where_torch_needs_it(platform: str, torch: str, python: str, added: list[str]) -> None:
    plan = torch_plan(platform, "cpu", python, torch)
    assert [rule.value for rule in plan.added_requirements] == added
    assert all("pytorch/pytorch#163946" in rule.why for rule in plan.added_requirements)


def _ctx(tmp_path: Path, plan: Plan, wheel: Path) -> Context:
    inputs = {"source_info": source_info(tmp_path / "src", wheel), "built_wheel": Artifact.of(wheel)}
    return Context(plan=plan, root=tmp_path / "ws", options=RunOptions(cache_dir=tmp_path / "cache"), inputs=inputs)


def test_the_repair_adds_it_and_the_conda_package_depends_on_it(tmp_path: Path) -> None:
    """Through the linux repair as the pipeline runs it (a pure-Python stand-in with the Plan's name is copied
    through), then the conda stage's conversion of the repaired wheel's metadata."""
    plan = torch_plan("linux-64", "cpu", "3.9", "2.8.0")
    upstream = ["filelock", "typing-extensions>=4.10.0", 'setuptools; python_version >= "3.12"']
    built = make_wheel(tmp_path / "built", plan.root.wheel, requires=upstream)
    result = repair.run(_ctx(tmp_path, plan, built))
    repaired = result.outputs["repaired_wheel"].path
    info = wheelfile.read_wheel(repaired)
    assert info.requires == (*upstream, LINE)
    with zipfile.ZipFile(repaired) as archive:
        assert checks.record_problems(archive, wheelfile.find_dist_info(archive)) == []
    said = result.message.split("; Requires-Dist added: ", 1)[1]
    assert said.startswith(f"{LINE}, which torch 2.8.0 imports undeclared (torch/distributed/elastic/rendezvous/")
    assert "pytorch/pytorch#163946" in said
    assert wheel_requires(info, plan.conda.requirements) == ("filelock", "typing_extensions >=4.10.0",
                                                             "importlib-metadata")  # fmt: skip


def test_a_wheel_that_declares_it_is_left_as_it_is(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "cpu", "3.9", "2.8.0")
    fixed = make_wheel(tmp_path / "built", plan.root.wheel, requires=["filelock", "importlib-metadata>=4"])
    target = tmp_path / "out" / plan.root.wheel
    target.parent.mkdir()
    assert torch_wheel.finish(_ctx(tmp_path, plan, fixed), fixed, target, []) == ([], [], {})
    assert wheelfile.read_wheel(target).requires == ("filelock", "importlib-metadata>=4")
    assert torch_wheel.said_added([], plan) == ""


def test_the_plan_command_says_it(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "plan", "--platform", "win-64", "--cuda", "cpu", "--py"]
    env = {"COLUMNS": "4000", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([*argv, "3.9", "--torch", "2.8.0"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    (line,) = [line.split("added requirement", 1)[1].strip() for line in run.stdout.splitlines() if "added" in line]
    assert line.startswith(f"{LINE}: torch imports it undeclared (torch/distributed/elastic/rendezvous/registry.py")
    newer = subprocess.run([*argv, "3.10", "--torch", "2.8.0"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert newer.returncode == 0, newer.stderr
    assert "added requirement" not in newer.stdout
