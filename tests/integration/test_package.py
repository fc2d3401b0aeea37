"""torchbuild as users install it: the wheel ``pip wheel .`` builds holds every file the pipeline reads at run time
(data, stored repodata, the recipe, native sources, the smoke's resources), and, installed into a fresh venv, its
``torchbuild`` command runs from an empty folder outside the checkout with the built-in matrix.

The wheel is built from a copy of the tracked files (a build in the checkout would leave build/ and *.egg-info
there); the venv takes torchbuild's dependencies from the package index (pip's cache makes it quick)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import TORCH_WHEEL
from tests.conftest import REPODATA, ROOT

BIN = "Scripts" if sys.platform == "win32" else "bin"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    command: Path  # the venv's torchbuild


def _tracked(under: str = "") -> list[str]:
    done = subprocess.run(["git", "ls-files", "-z", "--", under or "."], cwd=ROOT, capture_output=True, check=True)
    return [name for name in done.stdout.decode().split("\0") if name]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("skipped: the wheel is built from the checkout's tracked files (git ls-files)")
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    for name in _tracked():
        if not name.startswith(("tests/", "bench/")) and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(work / "dist")],
                   cwd=source, check=True, timeout=600)  # fmt: skip
    (wheel,) = (work / "dist").glob("torchbuild-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, timeout=300)
    python = work / "venv" / BIN / ("python.exe" if sys.platform == "win32" else "python")
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=900)
    yield Installed(wheel=wheel, command=work / "venv" / BIN / "torchbuild")


def _run(installed: Installed, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHBUILD_REPODATA")}
    return subprocess.run([str(installed.command), *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=timeout, env={**env, "COLUMNS": "200"})  # fmt: skip


def test_the_wheel_holds_every_file_the_pipeline_reads(installed: Installed) -> None:
    members = set(zipfile.ZipFile(installed.wheel).namelist())
    shipped = [name for name in _tracked("torchbuild") if not name.endswith(".pyc")]
    assert [name for name in shipped if name not in members] == []
    # named here too, so that a file moved out of torchbuild/ cannot pass unseen
    for needed in ("torchbuild/recipes/pytorch/meta.yaml", "torchbuild/recipes/pytorch/bld.bat",
                   "torchbuild/data/repodata/conda-forge/linux-64/repodata.json", "torchbuild/data/matrix.yaml",
                   "torchbuild/platforms/windows/native/loadcheck.c",
                   "torchbuild/stages/smoke/resources/run_checks.py"):  # fmt: skip
        assert needed in members


def test_the_built_in_matrix_is_the_projects(installed: Installed) -> None:
    built_in = zipfile.ZipFile(installed.wheel).read("torchbuild/data/matrix.yaml")
    assert built_in == (ROOT / "matrix.yaml").read_bytes()


def test_the_command_runs_from_an_empty_folder(installed: Installed, tmp_path: Path) -> None:
    shown = _run(installed, tmp_path, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: torchbuild ")
    assert "Without a command, 'run' is meant: torchbuild --cuda cpu --py 3.11" in " ".join(shown.stdout.split())
    planned = _run(installed, tmp_path, "plan", "--cuda", "cpu", "--py", "3.11")
    assert planned.returncode == 0, planned.stderr
    assert "plan linux-64-cpu-py3.11" in planned.stdout or "plan win-64-cpu-py3.11" in planned.stdout
    assert list(tmp_path.iterdir()) == []  # a plan writes nothing, here or anywhere near the package


def test_a_matrix_in_the_folder_is_the_one_read(installed: Installed, tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text("torch: latest\nplatforms: [linux-64]\ncuda: [cpu]\npython: ['3.12']\n")
    listed = _run(installed, tmp_path, "matrix")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["linux-64-cpu-py3.12"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="skipped: the main job of a linux-64 cell, on linux")
def test_the_installed_command_runs_the_main_job(installed: Installed, tmp_path: Path) -> None:
    if not TORCH_WHEEL.is_file() or not REPODATA.is_dir():
        pytest.skip(f"skipped: needs the real torch wheel ({TORCH_WHEEL}) and the stored repodata ({REPODATA})")
    done = _run(installed, tmp_path, "--cuda", "cpu", "--py", "3.11", "--torch", "2.13.0", "--wheel", str(TORCH_WHEEL),
                "--repodata", str(REPODATA), "--compression-level", "1", "--cache-dir", str(tmp_path / "cache"),
                timeout=3600)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "all cells passed" in done.stdout  # the results are on stdout
    # the outputs are in the folder the user ran in, the recipe rendered from the package's template
    cell = tmp_path / "build" / "linux-64-cpu-py3.11-torch2.13.0"
    assert (cell / "conda" / "pytorch-2.13.0-py3.11_cpu_0.conda").is_file()
    assert "name: pytorch" in (cell / "recipe" / "meta.yaml").read_text(encoding="utf-8")
    assert (tmp_path / "channel" / "linux-64" / "pytorch-2.13.0-py3.11_cpu_0.conda").is_file()
