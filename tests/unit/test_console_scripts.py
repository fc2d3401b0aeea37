"""The smoke's "console scripts" check: every script torch declares loads its entry point, as the launcher a user
types (``torchrun``) would, except the ones packaging.yaml records as upstream's faults (broken_console_scripts).

The check runs in a child Python against a stand-in site-packages built here (a stand-in ``torch`` package, its
dist-info and small real modules the entry points name), and against the torch installed on this host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.conftest import ROOT
from torchbuild.stages.smoke.env import expect_args
from torchbuild.stages.smoke.resources import smoke_checks

SCRIPTS = """\
[console_scripts]
good = standin_ok:main
nested = standin_ok:App.run
gone = standin_gone.sub:main
needs-undeclared = standin_dep:main [extra]

[torchrun.logs_specs]
default = not_a_script:Nothing
"""


def _site(root: Path, entry_points: str | None = SCRIPTS) -> Path:
    site = root / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")  # a stand-in: the check finds torch's folder, imports nothing
    info = site / "torch-2.8.0+cpu.dist-info"
    info.mkdir()
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    (site / "standin_ok.py").write_text("def main():\n    pass\nclass App:\n    def run(self):\n        pass\n")
    (site / "standin_dep.py").write_text("import project_torch_does_not_declare\ndef main():\n    pass\n")
    return site


def _check(site: Path, *broken: str) -> str:
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from torchbuild.stages.smoke.resources.checks_install import check_console_scripts\n"
        "from torchbuild.stages.smoke.resources.smoke_base import CheckFailed, Expect\n"
        f"expect = Expect('2.8.0+cpu', 'cpu', None, None, broken_scripts={broken!r})\n"
        "try:\n    print(check_console_scripts(expect).message)\n"
        "except CheckFailed as exc:\n    print('failed:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return done.stdout.strip()


def test_a_script_that_cannot_load_fails_the_check_naming_it_and_why(tmp_path: Path) -> None:
    said = _check(_site(tmp_path))
    assert said == (
        "failed: gone (standin_gone.sub:main): ModuleNotFoundError: No module named 'standin_gone'; "
        "needs-undeclared (standin_dep:main): ModuleNotFoundError: No module named 'project_torch_does_not_declare'"
    )


def test_recorded_faults_pass_and_are_said_and_a_recorded_one_that_loads_is_said_too(tmp_path: Path) -> None:
    site = _site(tmp_path)
    said = _check(site, "gone", "needs-undeclared")
    assert said == (
        "2 of 4 console scripts load their entry point: good, nested; upstream's known faults, as recorded: "
        "gone (standin_gone.sub:main): ModuleNotFoundError: No module named 'standin_gone'; "
        "needs-undeclared (standin_dep:main): ModuleNotFoundError: No module named 'project_torch_does_not_declare'"
    )
    assert _check(site, "gone", "needs-undeclared", "good").endswith("; recorded as broken but loads: good")
    assert _check(site, "needs-undeclared").startswith("failed: gone (standin_gone.sub:main)")


def test_a_missing_attribute_fails_and_no_scripts_is_said(tmp_path: Path) -> None:
    site = _site(tmp_path, "[console_scripts]\nrenamed = standin_ok:App.start\n")
    assert _check(site) == "failed: renamed (standin_ok:App.start): AttributeError: type object 'App' has no " \
        "attribute 'start'"  # fmt: skip
    assert _check(_site(tmp_path / "none", None)) == "torch declares no console scripts"


def test_the_torch_on_this_host_loads_every_script_it_declares(tmp_path: Path) -> None:
    """The torch this project's environment has (2.10 and newer name torch.distributed.flight_recorder for
    torchfrtrace): through smoke_checks.py as the smoke stages run it."""
    pytest.importorskip("torch", reason="skipped: no torch installed in this environment")
    entry = Path(smoke_checks.__file__).with_name(smoke_checks.ENTRY)
    argv = [sys.executable, str(entry), "--expect-version", "any", "--expect-cuda", "cpu"]
    done = subprocess.run([*argv, "--only", "console scripts"], capture_output=True, text=True, cwd=tmp_path,
                          env=smoke_checks.clean_env(), timeout=300, check=False)  # fmt: skip
    (result,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"check"')]
    assert result["status"] == "passed", result
    assert "torchrun" in result["message"].split(": ", 1)[1].split("; ")[0]
    assert "known faults" not in result["message"]


@pytest.mark.parametrize(("torch", "python", "expected"), [
    ("1.9.1", "3.9", ["convert-caffe2-to-onnx", "convert-onnx-to-caffe2"]),  # need protobuf, click, onnx
    ("1.13.0", "3.9", ["convert-caffe2-to-onnx", "convert-onnx-to-caffe2", "torchrun"]),  # signal.SIGKILL
    ("1.13.1", "3.9", ["convert-caffe2-to-onnx", "convert-onnx-to-caffe2"]),
    ("2.0.0", "3.9", ["convert-caffe2-to-onnx", "convert-onnx-to-caffe2"]),  # their module left the wheel
    ("2.5.1", "3.10", ["convert-caffe2-to-onnx", "convert-onnx-to-caffe2", "torchfrtrace"]),
    ("2.8.0", "3.10", ["torchfrtrace"]),  # tools.flight_recorder: pytorch's source tree, not the wheel
    ("2.11.0", "3.10", []),
])  # fmt: skip
def test_the_plan_records_upstreams_broken_scripts_and_the_smoke_is_told(
    torch: str, python: str, expected: list[str]
) -> None:
    plan = torch_plan("win-64", "cpu", python, torch)
    assert [rule.value for rule in plan.broken_scripts] == expected
    args = expect_args(plan, "C:\\env\\Lib\\site-packages\\torch\\__init__.py")
    if expected:
        assert args[args.index("--expect-broken-scripts") + 1] == ",".join(expected)
    else:
        assert "--expect-broken-scripts" not in args


def test_the_plan_command_shows_them(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "plan", "--platform", "win-64", "--cuda", "cpu", "--py", "3.10"]
    env = {"COLUMNS": "4000", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([*argv, "--torch", "2.8.0"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    (line,) = [line.split("broken script", 1)[1].strip() for line in run.stdout.splitlines() if "broken script" in line]
    assert line.startswith("torchfrtrace: upstream's; the smoke expects it to fail (its entry point tools.flight_")
