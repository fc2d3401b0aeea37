"""TB208: every console script a wheel declares names a module the wheel carries, read from the archive alone (the
static twin of the smoke's console-scripts check, for the cells whose smoke cannot run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import make_wheel, real_torch_wheel, torch_plan
from torchbuild.wheel.scripts import script_check

WHEEL = "torch-2.7.0+cpu-cp312-cp312-win_amd64.whl"
# torch 2.7.0's entry_points.txt as PyPI's wheels carry it
ENTRY_POINTS_2_7 = """\
[console_scripts]
torchfrtrace = tools.flight_recorder.fr_trace:main
torchrun = torch.distributed.run:main
"""
TORCH_FILES = {"torch/__init__.py": b"", "torch/distributed/__init__.py": b"", "torch/distributed/run.py": b""}


def test_the_real_torch_wheels_scripts_each_name_a_module_it_carries() -> None:
    check = script_check(real_torch_wheel())  # torch 2.13.0: torchfrtrace lives in torch.distributed from 2.10
    assert check.status == "passed", check.message
    assert check.message.startswith("2 of 2 console scripts name a module in the wheel: ")
    assert "torchrun (torch.distributed.run:main)" in check.message
    assert "torchfrtrace (torch.distributed.flight_recorder.fr_trace:main)" in check.message


def test_a_script_whose_module_is_not_in_the_wheel_fails_naming_it(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, WHEEL, TORCH_FILES, entry_points=ENTRY_POINTS_2_7)
    check = script_check(wheel)
    assert check.status == "failed" and check.code == "TB208"
    assert check.message == (
        "torchfrtrace: its entry point tools.flight_recorder.fr_trace:main names a module the wheel does not carry "
        "(tools/flight_recorder/fr_trace.py or a package or extension of that name): `torchfrtrace` would stop with "
        "ModuleNotFoundError"
    )


def test_the_plans_recorded_faults_are_said_not_failed(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "cpu", "3.12", "2.7.0")  # packaging.yaml records torchfrtrace for 2.5 to 2.9
    wheel = make_wheel(tmp_path, WHEEL, TORCH_FILES, entry_points=ENTRY_POINTS_2_7)
    check = script_check(wheel, [rule.value for rule in plan.broken_scripts])
    assert check.status == "passed", check.message
    assert check.message == (
        "1 of 2 console scripts name a module in the wheel: torchrun (torch.distributed.run:main); upstream's known "
        "faults, as recorded: torchfrtrace (tools.flight_recorder.fr_trace is not in the wheel)"
    )


def test_a_recorded_fault_whose_module_is_there_is_left_to_the_smoke(tmp_path: Path) -> None:
    entry = "[console_scripts]\nconvert-caffe2-to-onnx = caffe2.python.onnx.bin.conversion:caffe2_to_onnx\n"
    files = {"caffe2/__init__.py": b"", "caffe2/python/onnx/bin/conversion.py": b"import google.protobuf\n"}
    check = script_check(make_wheel(tmp_path, WHEEL, files, entry_points=entry), ["convert-caffe2-to-onnx"])
    assert check.status == "passed"
    assert check.message.endswith(
        "; recorded as broken, module in the wheel (the smoke tells whether it loads): convert-caffe2-to-onnx"
    )


@pytest.mark.parametrize(
    "member",
    [
        "tool/cli.py",
        "tool/cli/__init__.py",
        "tool/cli.cp312-win_amd64.pyd",
        "tool/cli.pyd",
        "tool/cli.cpython-312-x86_64-linux-gnu.so",
        "tool/cli.abi3.so",
        "tool-1.0.data/purelib/tool/cli.py",
        "tool-1.0.data/platlib/tool/cli.py",
    ],
)
def test_a_module_counts_as_a_file_a_package_or_an_extension(tmp_path: Path, member: str) -> None:
    entry = "[console_scripts]\ntool = tool.cli:main [extra]\n[gui_scripts]\ntool-gui = tool.cli:gui\n"
    wheel = make_wheel(tmp_path, "tool-1.0-cp312-cp312-win_amd64.whl", {member: b""}, entry_points=entry)
    check = script_check(wheel)
    assert check.status == "passed", check.message
    assert check.message == (
        "2 of 2 console scripts name a module in the wheel: tool (tool.cli:main), tool-gui (tool.cli:gui)"
    )


@pytest.mark.parametrize("member", ["tool/cli.pyi", "tool/cli.py.orig", "tool/client.py", "other/tool/cli.py"])
def test_a_file_that_is_not_the_module_does_not_count(tmp_path: Path, member: str) -> None:
    entry = "[console_scripts]\ntool = tool.cli:main\n"
    wheel = make_wheel(tmp_path, "tool-1.0-py3-none-any.whl", {member: b""}, entry_points=entry)
    assert script_check(wheel).status == "failed"


def test_a_wheel_without_scripts_passes_saying_so(tmp_path: Path) -> None:
    check = script_check(make_wheel(tmp_path, WHEEL, TORCH_FILES))
    assert (check.status, check.message) == ("passed", "torch declares no console scripts")


def test_an_unreadable_wheel_fails_the_check(tmp_path: Path) -> None:
    broken = tmp_path / WHEEL
    broken.write_bytes(b"not a zip")
    check = script_check(broken)
    assert check.status == "failed" and WHEEL in check.message
