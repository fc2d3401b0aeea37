"""Resolution of real historical cells into Plans, and the refusals a user sees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.errors import UserError
from torchbuild.plan import Plan, resolve

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
MATRIX = matrix.parse("build:\n  max_jobs: 8\n", "test-matrix.yaml")


def plan_of(platform: str, cuda: str, python: str, torch: str = "latest", **build: str) -> Plan:
    m = matrix.parse("build:\n" + "".join(f"  {k}: {v}\n" for k, v in {"max_jobs": "8", **build}.items()))
    return resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), m)


# (platform, cuda, python, torch asked) -> (torch resolved, msvc toolset or gcc range, VS year, cudnn, build string)
HISTORICAL = [
    (("win-64", "8.0", "3.6", "0.4.0"), ("0.4.0", "14.0", 2015, 7, "py3.6_cuda8.0_cudnn7_0")),
    (("win-64", "9.0", "3.6", "latest"), ("1.1.0", "14.11", 2017, 7, "py3.6_cuda9.0_cudnn7_0")),
    (("win-64", "10.0", "3.7", "1.2.0"), ("1.2.0", "14.16", 2017, 7, "py3.7_cuda10.0_cudnn7_0")),
    (("win-64", "11.8", "3.10", "2.0.1"), ("2.0.1", "14.39", 2022, 8, "py3.10_cuda11.8_cudnn8_0")),
    (("win-64", "12.4", "3.11", "2.5.1"), ("2.5.1", "14.44", 2022, 9, "py3.11_cuda12.4_cudnn9_0")),
    (("win-64", "12.8", "3.12", "2.7.1"), ("2.7.1", "14.44", 2022, 9, "py3.12_cuda12.8_cudnn9_0")),
    (("win-64", "13.0", "3.13", "2.9.0"), ("2.9.0", "14.44", 2022, 9, "py3.13_cuda13.0_cudnn9_0")),
    (("win-64", "cpu", "3.11", "2.5.1"), ("2.5.1", "14.44", 2022, None, "py3.11_cpu_0")),
    (("win-64", "cpu", "3.5", "latest"), ("1.5.1", None, None, None, "py3.5_cpu_0")),
    (("linux-64", "9.0", "3.6", "1.1.0"), ("1.1.0", "4-6", None, 7, "py3.6_cuda9.0_cudnn7_0")),
    (("linux-64", "12.4", "3.12", "2.5.1"), ("2.5.1", "6-13", None, 9, "py3.12_cuda12.4_cudnn9_0")),
    (("linux-64", "cpu", "3.11", "2.13.0"), ("2.13.0", None, None, None, "py3.11_cpu_0")),
]


@pytest.mark.parametrize(("cell", "expected"), HISTORICAL, ids=["-".join(cell) for cell, _ in HISTORICAL])
def test_historical_cells(cell: tuple[str, str, str, str], expected: tuple[object, ...]) -> None:
    platform, cuda, python, torch = cell
    want_torch, want_compiler, want_vs, want_cudnn, want_build_string = expected
    plan = plan_of(platform, cuda, python, torch)
    assert plan.torch == want_torch
    assert plan.cudnn == want_cudnn
    assert plan.root.conda.build_string == want_build_string
    if platform == "win-64":
        if want_compiler is not None:
            assert plan.toolchain.msvc_toolset == want_compiler
            assert plan.toolchain.visual_studio == want_vs
            assert plan.toolchain.vcvarsall_args == ("x64", f"-vcvars_ver={want_compiler}")
        assert plan.root.wheel.endswith("win_amd64.whl")
        assert plan.conda.site_packages == "Lib/site-packages"
        assert plan.env["DISTUTILS_USE_SDK"] == "1"
    else:
        assert plan.toolchain.gcc_accepted == want_compiler
        assert plan.conda.site_packages == f"lib/python{python}/site-packages"
    if cuda == "cpu":
        assert plan.env["USE_CUDA"] == "0"
        assert "TORCH_CUDA_ARCH_LIST" not in plan.env
        assert plan.root.conda.build_number == 0
        assert plan.version == f"{want_torch}+cpu"
    else:
        assert plan.env["USE_CUDA"] == "1"
        assert plan.env["TORCH_CUDA_ARCH_LIST"]
        assert plan.root.conda.build_number == 100  # CUDA builds outrank CPU ones where __cuda exists
        assert "cpuonly <0a0" in plan.root.conda.constrains
        assert any(d.startswith("__cuda") for d in plan.root.conda.depends)


def test_cuda8_uses_vs2015_and_prebuild_with_ninja() -> None:
    plan = plan_of("win-64", "8.0", "3.6", "1.0.0")
    assert plan.toolchain.generator == "Ninja"
    assert plan.env["PREBUILD_COMMAND"] == r"%VS140COMNTOOLS%\..\..\VC\vcvarsall.bat"
    assert plan.env["PREBUILD_COMMAND_ARGS"] == "x86_amd64"
    assert plan.env["CUDA_PATH"] == "%CUDA_PATH_V8_0%"


def test_visual_studio_generators_for_old_cells() -> None:
    assert plan_of("win-64", "8.0", "3.6", "1.0.0", generator="visual-studio").env["CMAKE_GENERATOR"] == (
        "Visual Studio 14 2015 Win64"
    )
    assert plan_of("win-64", "9.0", "3.6", "1.0.0", generator="visual-studio").env["CMAKE_GENERATOR"] == (
        "Visual Studio 15 2017 Win64"
    )
    modern = plan_of("win-64", "12.4", "3.11", "2.5.1", generator="visual-studio")
    assert modern.env["CMAKE_GENERATOR"] == "Visual Studio 17 2022"
    assert modern.env["CMAKE_GENERATOR_PLATFORM"] == "x64"


def test_cuda_path_and_arch_list() -> None:
    plan = plan_of("win-64", "12.8", "3.12", "2.7.1")
    assert plan.env["CUDA_PATH"] == "%CUDA_PATH_V12_8%"
    assert plan.env["TORCH_CUDA_ARCH_LIST"] == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert (
        plan_of("win-64", "11.8", "3.10", "2.0.1").env["TORCH_CUDA_ARCH_LIST"]
        == "3.7+PTX;5.0;6.0;6.1;7.0;7.5;8.0;8.6;9.0"
    )
    assert plan_of("linux-64", "12.4", "3.12", "2.5.1").env["CUDA_HOME"] == "/usr/local/cuda-12.4"


def test_build_env_and_names() -> None:
    plan = plan_of("win-64", "12.4", "3.11", "2.5.1")
    assert plan.env["PYTORCH_BUILD_VERSION"] == "2.5.1+cu124"
    assert plan.env["PYTORCH_BUILD_NUMBER"] == "0"
    assert plan.env["MAX_JOBS"] == "8"
    assert plan.env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "sccache"
    assert plan.root.wheel == "torch-2.5.1+cu124-cp311-cp311-win_amd64.whl"
    assert plan.root.conda.filename == "pytorch-2.5.1-py3.11_cuda12.4_cudnn9_0.conda"
    # The VC runtime dependency is the conda stage's: at least this minimum, and the binaries' floor (vc_runtime.py).
    assert plan.conda.vc_runtime is not None
    assert (plan.conda.vc_runtime.package, plan.conda.vc_runtime.minimum) == ("vc14_runtime", "14.29")
    assert "cuda-version >=12.4,<12.5" in plan.root.conda.depends
    assert "python >=3.11,<3.12.0a0" in plan.root.conda.depends
    old = plan_of("win-64", "9.0", "3.6", "0.4.1")
    assert old.root.wheel == "torch-0.4.1+cu90-cp36-cp36m-win_amd64.whl"
    assert old.conda.vc_runtime is not None and old.conda.vc_runtime.package == "vc"
    assert "cudatoolkit >=9.0,<9.1" in old.root.conda.depends
    assert plan_of("linux-64", "cpu", "3.8", "1.10.0").root.wheel.endswith("manylinux1_x86_64.whl")


def test_work_dirs_per_stage() -> None:
    plan = plan_of("linux-64", "cpu", "3.11", "2.13.0")
    assert plan.work_dir == "build/linux-64-cpu-py3.11-torch2.13.0"
    for stage in ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish", "recipe"):
        assert plan.stage_dirs[stage] == f"{plan.work_dir}/{stage}"


def test_plan_json_is_stable() -> None:
    """Same input, same bytes; and the schema only changes on purpose (regenerate with TORCHBUILD_REGEN=1)."""
    cell = Cell(platform="win-64", cuda="12.4", python="3.12", torch="2.5.1")
    first = resolve(cell, MATRIX).to_json()
    assert first == resolve(cell, MATRIX).to_json()
    golden = GOLDEN / "plan-win-64-cuda12.4-py3.12-torch2.5.1.json"
    if os.environ.get("TORCHBUILD_REGEN"):
        golden.write_text(first)
    assert json.loads(first) == json.loads(golden.read_text()), "plan JSON changed: review, then TORCHBUILD_REGEN=1"
    assert first == golden.read_text()


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (("linux-64", "9.3", "3.6", "latest"), "Unknown CUDA version '9.3'. Valid: cpu, 8.0, 9.0"),
        (("win-64", "cpu", "2.7", "latest"), "Python 2 is not supported"),
        (("win-64", "cpu", "3.4", "latest"), "Python 3.4 is too old"),
        (("win-64", "cpu", "3.99", "latest"), "No PyTorch release supports Python 3.99. Valid: 3.5"),
        (("win-64", "cpu", "three", "latest"), "is not of the form X.Y"),
        (("win-32", "cpu", "3.6", "latest"), "PyTorch does not support 32-bit Windows"),
        (("osx-arm64", "cpu", "3.6", "latest"), "Unknown platform 'osx-arm64'. Valid platforms: win-64 or linux-64"),
        (
            ("win-64", "9.0", "3.6", "2.5.1"),
            "torch 2.5.1 has no win-64 build for CUDA 9.0 with Python 3.6. "
            "Releases that do: 0.4.0, 0.4.1, 1.0.0, 1.0.1 or 1.1.0.",
        ),
        (("win-64", "cpu", "3.11", "9.9.9"), "Unknown torch release '9.9.9'"),
        (
            ("linux-64", "cpu", "3.11", "1.10.0"),
            "Releases that do: 1.13.0, 1.13.1, ..., 2.14.1 or 2.15.0 (30 releases)",
        ),
        (("win-64", "8.0", "3.11", "latest"), "No PyTorch release supports win-64 with CUDA 8.0 and Python 3.11"),
    ],
)
def test_refused_cells(cell: tuple[str, str, str, str], message: str) -> None:
    platform, cuda, python, torch = cell
    with pytest.raises(UserError) as info:
        resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), MATRIX)
    assert message in str(info.value)


def test_msvc_that_nvcc_refuses() -> None:
    with pytest.raises(UserError) as info:
        plan_of("win-64", "12.1", "3.11", "2.3.1", msvc_toolset='"14.40"')
    assert "nvcc from CUDA 12.1 refuses MSVC 14.40: it accepts MSVC 14.10-14.39" in str(info.value)
    # The same toolset is fine where nvcc accepts it.
    assert plan_of("win-64", "12.4", "3.11", "2.5.1", msvc_toolset='"14.40"').toolchain.msvc_toolset == "14.40"
    with pytest.raises(UserError, match=r"Unknown MSVC toolset '15\.3'"):
        plan_of("win-64", "12.4", "3.11", "2.5.1", msvc_toolset='"15.3"')


def test_notes_concern_the_plans_platform() -> None:
    """NvToolsExt and MSVC guards are Windows matters, upstream's Linux arch lists and gcc bounds Linux ones."""
    win, linux = plan_of("win-64", "12.4", "3.12", "2.5.1"), plan_of("linux-64", "12.4", "3.12", "2.5.1")
    assert any("NvToolsExt" in n for n in win.notes)
    assert not any("NvToolsExt" in n or "guard" in n for n in linux.notes)
    win, linux = plan_of("win-64", "12.8", "3.12", "2.7.1"), plan_of("linux-64", "12.8", "3.12", "2.7.1")
    assert any("Linux cu128 wheels differ" in n for n in linux.notes)
    assert not any("Linux cu128" in n for n in win.notes)


def test_no_note_speaks_of_how_it_was_written() -> None:
    from torchbuild.knowledge.compat import PLATFORMS, load, notes_for

    compat = load()
    rows = [*compat.releases, *compat.cuda.values()]
    texts = [notes_for(row.uncertain, platform) for row in rows for platform in PLATFORMS]
    assert len([t for t in texts if t]) > 40
    for text in texts:
        for phrase in ("my own", "my knowledge", "from memory", "remembered", "the author"):
            assert phrase not in text.lower(), text
