"""One linux CUDA cell end to end in CI, as a user runs it (issue 24): `python pipeline.py --cuda 12.8 --py 3.11
--packages torch`. The pin step takes PyPI's unlabelled torch 2.10.0 wheel because it is the CUDA 12.8 build and its
nvidia-* pins resolve; the source stage proves that from the wheel and relabels it +cu128; the repair leaves every CUDA
library to the declared requirement that installs it; the conda package depends on the conda packages of the same
libraries at the wheel's versions; both smoke environments get the real nvidia-* wheels from the index and load each
CUDA library from them (no GPU here: the CUDA checks say skipped); the channel serves both artifacts.

torchvision and torchaudio beside it: tests/integration/test_linux_companions.py (nightly)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPODATA, ROOT
from torchbuild.conda.archive import read_package

CELL = "linux-64-cuda12.8-py3.11"
WHEEL = "torch-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
CONDA = "pytorch-2.10.0-py3.11_cuda12.8_cudnn9_0.conda"
# The conda packages of the libraries the wheel leaves to its nvidia-* requirements, at the wheel's pins
# (pypi_to_conda.yaml maps the names; cuda_wheels.yaml holds the pins)
CONDA_LIBRARIES = ("cuda-cudart 12.8.90.*", "cudnn 9.10.2.21.*", "libcublas 12.8.4.1.*", "nccl 2.27.5.*",
                   "libcusparse 12.5.8.93.*", "cusparselt 0.7.1.*", "libnvshmem3 3.4.5.*")  # fmt: skip


def _stages(workspace: Path) -> dict[str, dict[str, object]]:
    report = json.loads((workspace / "build" / "report.json").read_text())
    return {s["stage"]: s for s in report["cells"][0]["stages"]}


# A 915 MB torch wheel and 3 GB of nvidia-* wheels (downloaded once into the caches), a 680 MB conda package: ~3 min
# here with warm caches and the most disk of any test (12 GB at the peak): the nightly's. CI keeps the declared
# requirements' own tests (tests/integration/test_declared_requirements.py: torch 2.10.0's CUDA libraries resolve
# to its nvidia-* requirements, MKL left to its requirement through every stage).
@pytest.mark.nightly
def test_the_linux_cuda_12_8_cell_passes_every_stage_with_its_cuda_from_the_requirements(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--cuda", "12.8", "--py", "3.11", "--packages", "torch",
            "--matrix", str(ROOT / "matrix.yaml"), "--repodata", str(REPODATA), "--compression-level", "1"]  # fmt: skip
    env = {**os.environ, "COLUMNS": "400", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "Traceback" not in out

    # which release, and why
    assert "offer 2.10.0 for this cell (PyPI's unlabelled 2.10.0 wheel is its CUDA 12.8 build, and its CUDA" in out
    assert (
        "(PyPI's cu128 build, unlabelled, proven by torch/version.py cuda = '12.8', nvidia-*-cu12 requirements) "
        "re-versioned to 2.10.0+cu128"
    ) in out
    # where each CUDA library comes from, said before anything runs and by the repair
    assert f"{CELL}: nvidia-cuda-runtime-cu12 (libcudart.so.12; 1 file): left to the requirement " in out
    stages = _stages(tmp_path)
    assert {name: s["status"] for name, s in stages.items()} == {
        "source": "passed", "build": "skipped", "repair": "passed", "conda": "passed", "verify": "passed",
        "smoke-wheel": "passed", "smoke-conda": "passed", "publish": "passed",
    }  # fmt: skip
    repair = str(stages["repair"]["message"])
    assert "left to the declared requirements: " in repair and ", 0 missing" in repair
    assert "libcudart.so.12 from nvidia-cuda-runtime-cu12==12.8.90" in repair
    assert "libcudnn.so.9 from nvidia-cudnn-cu12==9.10.2.21" in repair

    work = tmp_path / "build" / CELL
    with zipfile.ZipFile(work / "repair" / WHEEL) as archive:
        names = archive.namelist()
        metadata = archive.read("torch-2.10.0+cu128.dist-info/METADATA").decode()
    assert not [n for n in names if "libcudart" in n or "libcublas" in n or n.startswith("nvidia/")]
    assert 'Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"' in metadata

    depends = read_package(work / "conda" / CONDA, payload=False).index["depends"]
    assert set(CONDA_LIBRARIES) <= set(depends), depends
    assert "cuda-version >=12.8,<12.9" in depends

    reused = []
    for kind in ("wheel", "conda"):
        checks = {c["name"]: c for c in stages[f"smoke-{kind}"]["checks"]}  # type: ignore[attr-defined]
        imported = checks[f"{kind}: import"]
        assert imported["status"] == "passed"
        assert imported["message"].startswith("torch 2.10.0+cu128 (CUDA 12.8, cuDNN 9.10.2 as the wheel pins)")
        assert "of the declared requirements' libraries loaded" in imported["message"]
        assert checks[f"{kind}: cuda matmul"]["status"] == "skipped"
        # upstream's CUDA checks: what needs no GPU runs (torch's NCCL is the requirement's), the rest says why not
        runtime = checks[f"{kind}: cuda runtime"]
        assert runtime["status"] == "passed", runtime
        assert re.search(r"^NCCL (\d+\.\d+\.\d+) from nvidia-nccl-cu12 \1(\.\d+)?; ", runtime["message"]), runtime
        assert runtime["message"].endswith("device-side assert not run (no GPU)")
        compiled = checks[f"{kind}: torch.compile"]
        assert compiled["status"] == "passed" and "; CUDA part not run (no GPU)" in compiled["message"], compiled
        reused.append("; checked in an environment of the same content at " in compiled["message"])
    assert any(reused), "the venv and the conda prefix hold one content: one of the two reads the other's result"

    channel = tmp_path / "channel"
    assert (channel / "linux-64" / CONDA).is_file()
    assert (channel / "whl" / "simple" / "torch" / WHEEL).is_file()
