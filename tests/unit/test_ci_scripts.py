"""The nightly's helper scripts: CUDA installation from the data, and the closing summary from real reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from torchbuild.commands import selection
from torchbuild.config.matrix import load
from torchbuild.plan import Plan
from torchbuild.results import Artifact, Check
from torchbuild.run import report
from torchbuild.run.records import CellRun, StageRecord

sys.path.insert(0, str(ROOT / "scripts"))
import install_cuda


def script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_every_cuda_cell_of_the_matrix_has_an_installation() -> None:
    table = install_cuda.load_table()
    assert "CUDA Installation Guide for Microsoft Windows" in table["source"]
    cells = [c for c in load(ROOT / "matrix.yaml").cells() if c.cuda != "cpu"]
    assert cells
    for cell in cells:
        install = install_cuda.plan(cell.cuda, cell.platform, table)
        assert install.nvcc.endswith(("nvcc.exe", "nvcc")) and cell.cuda in install.nvcc


def test_windows_uses_the_network_installer_with_versioned_components() -> None:
    result = script("install_cuda.py", "--cuda", "12.8", "--platform", "win-64", "--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "download https://developer.download.nvidia.com/compute/cuda/12.8.1/network_installers/"
        "cuda_12.8.1_windows_network.exe"
    )
    assert lines[1].startswith("{tmp}/cuda_12.8.1_windows_network.exe -s nvcc_12.8 cudart_12.8 ")
    assert "nvtx_12.8" in lines[1] and "cublas_dev_12.8" in lines[1]
    assert r"$GITHUB_ENV CUDA_PATH_V12_8=C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v12.8" in lines
    full = install_cuda.plan("13.0", "win-64", install_cuda.load_table())
    assert full.commands[0][1:] == ("-s",)  # 13.0: the default set (see the data's source note)


def test_unknown_cuda_version_names_the_known_ones() -> None:
    result = script("install_cuda.py", "--cuda", "11.8", "--platform", "win-64", "--dry-run")
    assert result.returncode == 2
    assert "ci_cuda.yaml: no win-64 installer for CUDA 11.8; it has 12.6, 12.8, 13.0" in result.stderr
    assert "Traceback" not in result.stderr


def cell_report(directory: Path, cell_id: str, smoke: str) -> tuple[Plan, Artifact]:
    """A build or smoke job's report, written by the pipeline's own report writer."""
    matrix = load(ROOT / "matrix.yaml")
    (cell,) = [c for c in matrix.cells() if c.id == cell_id]
    (plan,) = selection.resolve_all(matrix, [cell])
    wheel = directory / plan.work_dir / "repair" / plan.root.wheel
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"a wheel")
    artifact = Artifact.of(wheel)
    records = [
        StageRecord(stage="build", status="passed", duration=3 * 3600, outputs={"built_wheel": artifact}),
        StageRecord(stage="smoke-wheel", status=smoke, duration=60, checks=[Check("wheel: import", smoke)]),
        StageRecord(stage="smoke-conda", status="passed", duration=120, checks=[Check("conda: import", "passed")]),
    ]
    report.write([CellRun(plan=plan, records=records)], directory)
    return plan, artifact


def test_summary_merges_build_and_gpu_smoke_reports(tmp_path: Path) -> None:
    cell_report(tmp_path / "report-win-64-cuda12.8-py3.12", "win-64-cuda12.8-py3.12", "skipped")
    cell_report(tmp_path / "smoke-win-64-cuda12.8-py3.12", "win-64-cuda12.8-py3.12", "failed")
    cpu, wheel = cell_report(tmp_path / "report-win-64-cpu-py3.12", "win-64-cpu-py3.12", "passed")
    cells = {"include": [{"cell": c} for c in ("win-64-cpu-py3.12", "win-64-cuda12.8-py3.12", "linux-64-cpu-py3.11")]}
    result = script("ci_summary.py", str(tmp_path), "--cells", json.dumps(cells), "--publish", "skipped")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("## Nightly: 1/3 cells passed; publish: skipped\n")
    assert f"| `win-64-cpu-py3.12` | {cpu.version} | ✅ 180 min | ✅ 1 min | ✅ 2 min | build runner |" in out
    assert "| `win-64-cuda12.8-py3.12` |" in out and "❌ 1 min | ✅ 2 min | GPU runner |" in out
    assert "| `linux-64-cpu-py3.11` | ❌ no report: the build job failed before writing one" in out
    assert f"| `win-64-cpu-py3.12` | built_wheel | `{cpu.root.wheel}` | 0.0 MB | `{wheel.sha256}` |" in out


def test_summary_writes_the_page_of_every_cell_with_the_gpu_smoke_in_place(tmp_path: Path) -> None:
    cell_report(tmp_path / "report-win-64-cuda12.8-py3.12", "win-64-cuda12.8-py3.12", "skipped")
    cell_report(tmp_path / "smoke-win-64-cuda12.8-py3.12", "win-64-cuda12.8-py3.12", "failed")
    cell_report(tmp_path / "report-win-64-cpu-py3.12", "win-64-cpu-py3.12", "passed")
    cells = {"include": [{"cell": c} for c in ("win-64-cpu-py3.12", "win-64-cuda12.8-py3.12")]}
    page = tmp_path / "report.html"
    result = script("ci_summary.py", str(tmp_path), "--cells", json.dumps(cells), "--html", str(page))
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert '<p class="verdict bad">1 of 2 cells passed</p>' in html
    assert '<a href="#win-64-cpu-py3.12">win-64-cpu-py3.12</a>' in html
    assert "<h3>win-64-cuda12.8-py3.12 / smoke-wheel</h3>" in html  # the GPU runner's failure, first
