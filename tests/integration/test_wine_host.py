"""torchbuild itself on a Windows host under Wine (issue 43): python.org's embeddable CPython 3.11 for Windows with
pip and torchbuild's win_amd64 dependencies (scripts/wine_host.py), running `pipeline.py plan` and `doctor` for
the win-64 CPU cell. What passes here passed under Wine, not on Windows."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from torchbuild.platforms.windows import wine

pytestmark = pytest.mark.nightly
CELL = ["--platform", "win-64", "--cuda", "cpu", "--py", "3.11"]


@pytest.fixture(scope="module", autouse=True)
def _needs_wine() -> None:
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")


def wine_host(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "wine_host.py"), *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=1800, check=False, cwd=ROOT)  # fmt: skip


@pytest.fixture(scope="module")
def host() -> str:
    proc = wine_host("prepare")
    assert proc.returncode == 0, proc.stderr
    assert "CPython 3.11.9 embeddable" in proc.stdout
    return proc.stdout


def test_plan_runs_under_wine_on_the_embeddable_cpython(host: str) -> None:
    proc = wine_host("run", "--", "plan", *CELL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.replace("\r\n", "\n")
    assert out.startswith("plan win-64-cpu-py3.11\n")
    assert "  platform                         win-64\n" in out
    # the build dependencies by their file names (url2pathname once made them "S:\files.pythonhosted.org\...")
    assert "mkl-include (mkl_include-2024.2.0-py2.py3-none-win_amd64.whl)" in out
    assert "Traceback" not in proc.stdout + proc.stderr


def test_doctor_runs_under_wine_and_names_what_is_missing_with_the_fix(host: str) -> None:
    proc = wine_host("run", "--", "doctor", *CELL)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # missing: Visual Studio, cmake, ninja
    out = proc.stdout
    assert "✓ Python 3.11" in out and "python.exe" in out  # the Windows python.exe under Wine
    assert "vswhere.exe not found at C:\\Program Files (x86)\\Microsoft Visual Studio\\Installer\\vswhere.exe" in out
    assert "Fix: install Visual Studio 2017 or newer (Build Tools are enough)" in out
    assert "✗ cmake" in out and "fix: install CMake" in out
    assert "Traceback" not in proc.stdout + proc.stderr
