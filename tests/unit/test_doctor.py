"""`doctor` on this host: every requirement found or missing with its fix; and the CLI's refusals of bad source
options. (The Windows branch needs vswhere/cmd.exe; its parsing is covered in test_toolchain_msvc.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import torch_plan
from torchbuild.commands import doctor

ROOT = Path(__file__).resolve().parent.parent.parent


def names(rows: list[doctor.Requirement]) -> dict[str, doctor.Requirement]:
    return {r.name: r for r in rows}


def test_win64_cell_on_linux_needs_a_windows_host(tmp_path: Path) -> None:
    if sys.platform == "win32":
        pytest.skip("skipped: this host is Windows")
    rows = doctor.requirements(torch_plan("win-64", "12.4", "3.12", "2.5.1"), tmp_path)
    assert len(rows) == 1 and not rows[0].found
    assert rows[0].name == "a win-64 host" and "this host is linux-64" in rows[0].detail


def test_cuda12_without_a_toolkit_says_wheels_cannot_serve_it(tmp_path: Path) -> None:
    if Path("/usr/local/cuda-12.4/bin/nvcc").exists():
        pytest.skip("skipped: CUDA 12.4 is installed here")
    rows = names(doctor.requirements(torch_plan("linux-64", "12.4", "3.11", "2.5.1"), tmp_path, {"PATH": "/usr/bin"}))
    nvcc = rows["nvcc 12.4"]
    assert not nvcc.found and "only ptxas" in nvcc.fix and "/usr/local/cuda-12.4" in nvcc.fix
    assert rows["cmake"].required and rows["sccache"].required is False


def test_cuda13_not_installed_is_provisionable(tmp_path: Path) -> None:
    if Path("/usr/local/cuda-13.2/bin/nvcc").exists():
        pytest.skip("skipped: CUDA 13.2 is installed here")
    plan = torch_plan("linux-64", "13.2", "3.11", "2.15.0")
    rows = names(doctor.requirements(plan, tmp_path, {"PATH": "/usr/bin"}))
    nvcc = rows["nvcc 13.2"]
    assert nvcc.found and "a run provisions it from the nvidia-cuda-nvcc==13.2.* wheels" in nvcc.detail
    assert not (tmp_path / "cuda").exists()  # doctor changes nothing


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *args], cwd=cwd, capture_output=True, text=True)


def test_doctor_cli_exit_code_and_fixes(tmp_path: Path) -> None:
    proc = run_cli("doctor", "--platform", "win-64", "--cuda", "12.4", "--py", "3.12", "--torch", "2.5.1",
                   "--cache-dir", str(tmp_path), cwd=tmp_path)
    if sys.platform == "win32":
        pytest.skip("skipped: this host is Windows")
    assert proc.returncode == 1
    assert "win-64-cuda12.4-py3.12-torch2.5.1" in proc.stdout and "1 missing" in proc.stdout
    assert "fix: run this cell on a win-64 machine" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source-dir", "/nonexistent/pytorch"], "--source-dir /nonexistent/pytorch: no such directory"),
        (["--source-dir", ".", "--git-ref", "v2.5.1"], "--source-dir and --git-ref both name the source"),
    ],
)
def test_bad_source_options(args: list[str], message: str, tmp_path: Path) -> None:
    proc = run_cli("--cuda", "cpu", "--py", "3.11", "--torch", "2.5.1", *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_source_dir_that_is_not_pytorch_fails_the_run(tmp_path: Path) -> None:
    proc = run_cli("--platform", "linux-64", "--cuda", "cpu", "--py", "3.11", "--torch", "2.5.1",
                   "--source-dir", str(ROOT / "tests" / "fixtures" / "cuda_ext"), "--cache-dir", str(tmp_path / "c"),
                   cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "is not a PyTorch checkout" in proc.stderr
    assert not (tmp_path / "channel").exists()
