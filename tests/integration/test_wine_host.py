"""torchbuild itself on a Windows host under Wine (issue 43): python.org's embeddable CPython 3.11 for Windows with
pip and torchbuild's win_amd64 dependencies (scripts/wine_host.py), running `pipeline.py plan` and `doctor` for
the win-64 CPU cell. What passes here passed under Wine, not on Windows."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.builders import torch_plan
from tests.conftest import REPODATA, ROOT
from torchbuild.config import dll_providers
from torchbuild.config.options import RunOptions
from torchbuild.platforms.windows import pe, providers, wine
from torchbuild.stages.source import fetch

pytestmark = [pytest.mark.nightly, pytest.mark.usefixtures("needs_wine")]
CELL = ["--platform", "win-64", "--cuda", "cpu", "--py", "3.11"]
CACHE = RunOptions().cache_dir


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


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wine_host", ROOT / "scripts" / "wine_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_prefix_is_laid_out_with_the_real_vc_runtime_that_the_repairs_system32_provider_takes(
    tmp_path: Path,
) -> None:
    found = wine.find()
    assert found is not None
    prefix = wine.fresh_prefix(found, CACHE, tmp_path / "prefix")
    system32 = prefix / "drive_c" / "windows" / "system32"
    assert pe.file_version((system32 / "msvcp140.dll").read_bytes(), "msvcp140.dll") is None  # Wine's own

    script = _script()
    script.lay_out_system32(prefix, script.vc_runtime_dlls(CACHE))
    # the data's %SystemRoot%\\System32, as a Windows program under Wine sees it (names case-insensitive there)
    windows = tmp_path / "windows"
    windows.mkdir()
    (windows / "System32").symlink_to(system32)
    located = providers.locate(
        ["msvcp140.dll", "vcruntime140_1.dll"], dll_providers.load(), cuda="cpu", cudnn=None, python="3.11",
        cache_dir=tmp_path / "cache", log=tmp_path / "providers.log", on_windows=True,
        env={"SystemRoot": str(windows)},
    )  # fmt: skip
    assert [(hit.name, hit.provider, hit.wheel) for hit in located] == [
        ("msvcp140.dll", "msvc-runtime", None), ("vcruntime140_1.dll", "msvc-runtime", None)
    ]  # fmt: skip
    assert {Path(hit.origin).resolve() for hit in located} == {system32.resolve()}  # System32, not the provider wheel
    assert pe.file_version(located[0].path.read_bytes(), "msvcp140.dll") == "14.44.35211.0"
    assert not (tmp_path / "cache").exists(), "the provider wheel was not needed"


UNDER_WINE_CHOICE = """
import sys
from pathlib import Path
from torchbuild import plan
from torchbuild.config import matrix
from torchbuild.host.platform import wine_version
from torchbuild.stages.smoke.venv import VenvBackend
wanted = matrix.Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.13.0")
cell = plan.resolve(wanted, matrix.load(Path("matrix.yaml")))
backend = VenvBackend(cell, sys.executable, Path("torch.whl"))
print(wine_version(), backend.extras(), backend.where)
"""


def test_a_windows_host_under_wine_takes_smoke_envs_rows_for_wine_and_says_so(host: str, tmp_path: Path) -> None:
    """Wine 8.0's ucrtbase lacks crealf, which numpy >= 2.1 imports: smoke_envs.yaml's `wine: true` rows pin an older
    numpy. The smoke on a Windows host under Wine must take them, as the Linux host's Wine smoke does."""
    script = _script()
    found = wine.find()
    assert found is not None
    python = script.prepare("3.11", CACHE).python
    with wine.Session(found, wine.fresh_prefix(found, CACHE, tmp_path / "prefix"), script.ENV) as session:
        ran = session.run([python, "-c", UNDER_WINE_CHOICE], timeout=600, cwd=ROOT)
    assert ran.returncode == 0, wine.without_noise(ran.stderr)
    assert ran.stdout.strip().startswith(f"{found.version} ['numpy<=2.0.2']"), ran.stdout
    assert ran.stdout.strip().endswith(f"on this win-64 host under Wine {found.version} (Python 3.11.9)"), ran.stdout


# --- the whole win-64 CPU cell under Wine, from PyPI's torch 2.13.0 win_amd64 wheel ---------------------------------

STAGES = ("source", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")


@pytest.fixture(scope="module")
def cell_run(host: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    plan = torch_plan("win-64", "cpu", "3.11", "2.13.0")
    wheel = fetch(plan, CACHE, tmp_path_factory.mktemp("fetch") / "pip.log", version=plan.torch).path
    work = tmp_path_factory.mktemp("cell")
    shutil.copyfile(wheel, work / wheel.name)
    cache = wine.windows_path(CACHE / "wine-host" / "cache")
    proc = wine_host(
        "run", "--workdir", str(work), "--", "run", *CELL, "--torch", "2.13.0",
        "--wheel", wine.windows_path(work / wheel.name), "--cache-dir", cache,
        "--repodata", wine.windows_path(REPODATA),  # the stored repodata: name lookups under Wine 8.0 failed once
    )  # fmt: skip
    return work, proc


def test_the_win64_cpu_cell_passes_every_stage_on_a_windows_host_under_wine(
    cell_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    work, proc = cell_run
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    for stage in STAGES:
        assert f"✓ {stage}" in out, stage
    # the repair took the VC runtime from the prefix's System32, as on a Windows build machine
    assert "vendored msvcp140.dll (C:\\windows\\System32)" in out
    assert "on this win-64 host under Wine" in out  # the smoke says where it ran
    assert list((work / "channel").rglob("torch-2.13.0+cpu-cp311-cp311-win_amd64.whl"))
    assert (work / "channel" / "win-64" / "pytorch-2.13.0-py3.11_cpu_0.conda").is_file()


def test_pip_installs_torch_from_the_channel_with_the_embeddable_cpython_under_wine(
    cell_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    work, proc = cell_run
    assert proc.returncode == 0, "the cell did not publish"
    index = "file:///" + wine.windows_path(work / "channel" / "whl" / "simple").replace("\\", "/")
    copy = tmp_path / "python"
    pip = ["-m", "pip", "install", "--index-url", index, "--extra-index-url", "https://pypi.org/simple"]
    # pinned: with PyPI as an extra index pip would take its newer torch, as on every host
    installed = wine_host("python", "--copy-to", str(copy), "--workdir", str(tmp_path), "--", *pip, "torch==2.13.0+cpu")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Successfully installed" in installed.stdout and "torch-2.13.0+cpu" in installed.stdout
    imported = wine_host("python", "--copy-to", str(copy), "--workdir", str(tmp_path), "--", "-c",
                         "import torch; print(torch.__version__, torch.ones(2, 3).sum().item())")  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip() == "2.13.0+cpu 6.0"
