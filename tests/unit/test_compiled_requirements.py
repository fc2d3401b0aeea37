"""A wheel compiled from a checkout declares the requirements that provide its declared libraries, as PyPI's wheel of
the release does (issue 24, item 3): the Plan's build environment carries them for torch's setup.py
(PYTORCH_EXTRA_INSTALL_REQUIREMENTS), and the repair adds the Requires-Dist lines a wheel lacks. The wheels here are
small real wheels built in the test (stand-ins named torch, not the real torch)."""

from __future__ import annotations

import email.parser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.builders import make_wheel, source_info, torch_plan
from tests.conftest import ROOT
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import Plan, resolve
from torchbuild.results import Artifact
from torchbuild.stages import Context
from torchbuild.stages.build.activate import Activation
from torchbuild.stages.build.stage import build_environment
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.repair import torch_wheel
from torchbuild.stages.source import fetch
from torchbuild.wheel import checks, wheelfile
from torchbuild.wheel.wheelfile import WheelError, with_requirements

VARIABLE = "PYTORCH_EXTRA_INSTALL_REQUIREMENTS"
CUDA_128 = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
RECORD_2_10_0 = cuda_wheels.load().releases["2.10.0"].requires_dist


# --- the Plan ------------------------------------------------------------------------------------------------


def test_a_cuda_cell_that_keeps_its_libraries_passes_the_records_lines_to_setup_py() -> None:
    value = CUDA_128.env[VARIABLE]
    # torch's setup.py splits the variable on "|" into install_requires: the record's lines come back verbatim
    assert value.split("|") == list(RECORD_2_10_0)
    assert len(RECORD_2_10_0) == 17
    assert value.startswith('cuda-bindings==12.9.4; platform_system == "Linux" and platform_machine == "x86_64"|')
    cublas = 'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux" and platform_machine == "x86_64"'
    assert cublas in value.split("|")
    # every library left to a requirement comes from one of those lines
    assert {w.requirement for w in CUDA_128.declared_libraries} <= set(RECORD_2_10_0)


def test_the_plan_command_shows_the_variable(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "plan", "--platform", "linux-64", "--cuda", "12.8", "--py", "3.11",
         "--torch", "2.10.0"],
        cwd=tmp_path, capture_output=True, text=True, check=False, env={"COLUMNS": "4000", "PATH": "/usr/bin:/bin",
                                                                       "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stdout.splitlines() if VARIABLE in line]
    assert line.split(VARIABLE, 1)[1].strip() == "|".join(RECORD_2_10_0)


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        (Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0"), "a CPU cell declares no library"),
        # torch 2.11.0's unlabelled linux wheel is the CUDA 13.0 build: a CUDA 12.8 cell of it has no record
        (Cell(platform="linux-64", cuda="12.8", python="3.11", torch="2.11.0"), "no record for the cell's CUDA"),
        # torch 2.3.x's setup.py declares mkl itself (cuda_wheels.yaml declared_by_setup_py)
        (Cell(platform="win-64", cuda="cpu", python="3.12", torch="2.3.1"), "setup.py declares mkl itself"),
        (
            Cell(platform="win-64", cuda="cpu", python="3.12", torch="2.3.1", declared_libraries="vendor"),
            "vendored: the wheel drops the requirement",
        ),
    ],
)
def test_cells_that_leave_nothing_to_add_get_no_variable(cell: Cell, why: str) -> None:
    plan = resolve(cell, matrix.load(ROOT / "matrix.yaml"))
    assert VARIABLE not in plan.env, why


def test_lines_torchs_own_setup_py_declares_are_left_out() -> None:
    """torch 2.3.x's setup.py lists mkl (Windows only) in install_requires: its linux wheels carry the line too."""
    plan = torch_plan("win-64", "cpu", "3.12", "2.3.1")
    assert [w.name for w in plan.declared_libraries] == ["mkl", "intel-openmp", "tbb"]  # still left to mkl
    assert cuda_wheels.extra_install_requirements("win-64", "2.3.1") == {}
    linux = cuda_wheels.load().releases["2.3.1"].requires_dist
    assert 'mkl (<=2021.4.0,>=2021.1.1) ; platform_system == "Windows"' in linux
    passed = cuda_wheels.extra_install_requirements("linux-64", "2.3.1")[VARIABLE].split("|")
    assert passed == [line for line in linux if not line.startswith("mkl ")]
    assert 'nvidia-cudnn-cu12 (==8.9.2.26) ; platform_system == "Linux" and platform_machine == "x86_64"' in passed


# --- wheelfile.with_requirements -----------------------------------------------------------------------------

METADATA = (
    b"Metadata-Version: 2.1\nName: torch\nVersion: 2.10.0+cu128\nRequires-Dist: filelock\n"
    b'Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"\nProvides-Extra: opt-einsum\n'
    b"Description-Content-Type: text/markdown\n\nRequires-Dist: nvidia-nccl-cu12 in the description stays text\n"
)


def test_missing_requirements_go_after_the_last_requires_dist_and_every_other_byte_stays() -> None:
    lines = ['nvidia-nccl-cu12==2.27.5; platform_system == "Linux"', "filelock>=3", "opt-einsum==3.4"]
    text, added = with_requirements(METADATA, lines)
    # filelock is declared; opt-einsum only under an extra, which does not provide it to every install
    assert added == ['nvidia-nccl-cu12==2.27.5; platform_system == "Linux"', "opt-einsum==3.4"]
    anchor = b'Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"\n'
    new = b'Requires-Dist: nvidia-nccl-cu12==2.27.5; platform_system == "Linux"\nRequires-Dist: opt-einsum==3.4\n'
    assert text == METADATA.replace(anchor, anchor + new)
    headers = email.parser.BytesParser().parsebytes(text).get_all("Requires-Dist") or []
    assert headers[-2:] == added  # in the header block: a METADATA reader sees them


def test_a_wheel_that_declares_them_is_unchanged() -> None:
    text, added = with_requirements(METADATA, ["filelock==3.20.0"])
    assert (text, added) == (METADATA, [])


def test_headers_without_requires_dist_or_body_get_them_at_the_end_in_their_line_ending() -> None:
    crlf = b"Metadata-Version: 2.1\r\nName: torch\r\nVersion: 2.3.1\r\n\r\nbody\r\n"
    text, _ = with_requirements(crlf, ['mkl<=2021.4.0,>=2021.1.1; platform_system == "Windows"'])
    assert text == crlf.replace(
        b"2.3.1\r\n\r\n", b'2.3.1\r\nRequires-Dist: mkl<=2021.4.0,>=2021.1.1; platform_system == "Windows"\r\n\r\n'
    )
    unterminated = b"Metadata-Version: 2.1\nName: torch"
    assert with_requirements(unterminated, ["a"])[0] == unterminated + b"\nRequires-Dist: a\n"


def test_a_malformed_requires_dist_names_itself() -> None:
    with pytest.raises(WheelError, match="Requires-Dist 'nvidia cublas' is not a requirement"):
        with_requirements(b"Name: torch\nRequires-Dist: nvidia cublas\n", ["a"])


# --- the repair ----------------------------------------------------------------------------------------------


def _ctx(tmp_path: Path, plan: Plan, wheel: Path) -> Context:
    inputs = {"source_info": source_info(tmp_path / "src", wheel), "built_wheel": Artifact.of(wheel)}
    return Context(plan=plan, root=tmp_path / "ws", options=RunOptions(cache_dir=tmp_path / "cache"), inputs=inputs)


def _metadata_and_record(wheel: Path) -> tuple[bytes, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        dist_info = wheelfile.find_dist_info(archive)
        return archive.read(f"{dist_info}/METADATA"), checks.record_problems(archive, dist_info)


def test_repair_of_a_compiled_wheel_without_them_adds_the_records_lines(tmp_path: Path) -> None:
    """Through the linux repair as the pipeline runs it: a pure-Python stand-in with the Plan's name needs nothing
    vendored, so it is copied through (the keep path), and gains the lines."""
    compiled = make_wheel(tmp_path / "built", CUDA_128.root.wheel, requires=["filelock", "sympy>=1.13.3"])
    result = repair.run(_ctx(tmp_path, CUDA_128, compiled))
    repaired = result.outputs["repaired_wheel"].path
    before, _ = _metadata_and_record(compiled)
    after, problems = _metadata_and_record(repaired)
    assert problems == []  # RECORD lists METADATA's new hash and size
    expected = sorted({w.requirement for w in CUDA_128.declared_libraries}, key=RECORD_2_10_0.index)
    assert after == before + b"".join(f"Requires-Dist: {line}\n".encode() for line in expected)
    assert len(expected) == 15  # cuda-bindings and triton install no library the wheel loads
    pins = "; ".join(line.split(";")[0] for line in expected)
    assert f"Requires-Dist added (15, markers as in torchbuild/data/cuda_wheels.yaml): {pins}" in result.message
    assert pins.startswith("nvidia-cuda-nvrtc-cu12==12.8.93; nvidia-cuda-runtime-cu12==12.8.90; ")
    assert wheelfile.read_wheel(repaired).requires == ("filelock", "sympy>=1.13.3", *expected)


def test_repair_of_a_wheel_that_declares_them_keeps_its_metadata(tmp_path: Path) -> None:
    """PyPI's wheel (the record's lines, as upstream's build wrote them) and a compiled wheel whose setup.py took the
    Plan's variable declare them all already."""
    declared = make_wheel(tmp_path / "built", CUDA_128.root.wheel, requires=["filelock", *RECORD_2_10_0])
    result = repair.run(_ctx(tmp_path, CUDA_128, declared))
    after, problems = _metadata_and_record(result.outputs["repaired_wheel"].path)
    assert (after, problems) == (_metadata_and_record(declared)[0], [])
    assert "Requires-Dist added" not in result.message


def test_the_mkl_wheel_goes_through_the_same_finish(tmp_path: Path) -> None:
    """win-64 torch 2.3.1 keeps MKL: a compiled wheel without the mkl line gets it (the record's line, verbatim)."""
    plan = torch_plan("win-64", "cpu", "3.12", "2.3.1")
    compiled = make_wheel(tmp_path / "built", plan.root.wheel, requires=["filelock"])
    target = tmp_path / "out" / plan.root.wheel
    target.parent.mkdir()
    dropped, added, _renamed = torch_wheel.finish(_ctx(tmp_path, plan, compiled), compiled, target, [])
    assert (dropped, added) == ([], ['mkl <=2021.4.0,>=2021.1.1 ; platform_system == "Windows"'])
    assert wheelfile.read_wheel(target).requires == ("filelock", *added)
    assert _metadata_and_record(target)[1] == []
    # mkl-the-requirement brings intel-openmp and tbb: the one line declares all three
    assert torch_wheel.declared_requirements(plan) == added


def test_a_malformed_requires_dist_in_the_wheel_fails_the_stage_naming_it(tmp_path: Path) -> None:
    compiled = make_wheel(tmp_path / "built", CUDA_128.root.wheel, requires=["nvidia cublas"])
    with pytest.raises(StageFailed, match=r"torch-2\.10\.0\+cu128-.*\.whl: METADATA: Requires-Dist 'nvidia cublas'"):
        repair.run(_ctx(tmp_path, CUDA_128, compiled))


# A stand-in for torch's setup.py that reads the variable as torch's does (configure_extension_build: split on "|"
# into install_requires), so the test needs no checkout; setuptools writes the Requires-Dist.
STAND_IN_SETUP_PY = """\
import os
from setuptools import setup

extra = os.getenv("PYTORCH_EXTRA_INSTALL_REQUIREMENTS", "")
setup(name="torch", version=os.environ["PYTORCH_BUILD_VERSION"], py_modules=[],
      install_requires=["filelock", *(extra.split("|") if extra else [])])
"""


def test_a_wheel_built_with_the_plans_environment_declares_them_and_the_repair_keeps_it(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "setup.py").write_text(STAND_IN_SETUP_PY)
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    env, _ = build_environment(CUDA_128, Activation(requirements=()), {}, base, sccache=False)
    assert env[VARIABLE] == "|".join(RECORD_2_10_0)
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "-q", "-w", "dist"],
        cwd=checkout, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (built,) = (checkout / "dist").glob("*.whl")
    requires = wheelfile.read_wheel(built).requires
    assert requires[0] == "filelock"
    assert [Requirement(r) for r in requires[1:]] == [Requirement(line) for line in RECORD_2_10_0]
    # named and tagged as the Plan's wheel (the build stage's job, not the stand-in's), then repaired
    wheel = built.rename(tmp_path / CUDA_128.root.wheel)
    result = repair.run(_ctx(tmp_path, CUDA_128, wheel))
    assert _metadata_and_record(result.outputs["repaired_wheel"].path)[0] == _metadata_and_record(wheel)[0]
    assert "Requires-Dist added" not in result.message


@pytest.mark.slow  # downloads PyPI's torch 2.10.0 linux wheel (915 MB) once into the pipeline's cache
@pytest.mark.parametrize("platform", ["linux-64", "win-64"])
def test_pypis_wheels_declare_every_line_already(platform: str, tmp_path: Path) -> None:
    """The real wheels the records were read from: the repair adds nothing to them."""
    plan = CUDA_128 if platform == "linux-64" else torch_plan("win-64", "cpu", "3.12", "2.3.1")
    wheel = fetch(plan, RunOptions().cache_dir, tmp_path / "pip.log", version=plan.torch).path
    metadata = _metadata_and_record(wheel)[0]
    assert with_requirements(metadata, torch_wheel.declared_requirements(plan)) == (metadata, [])
    # and every line the Plan passes to a compiled build is one the wheel declares
    passed = plan.env.get(VARIABLE, "")
    declared = {Requirement(r).name for r in wheelfile.read_wheel(wheel).requires}
    assert {Requirement(line).name for line in passed.split("|") if line} <= declared
