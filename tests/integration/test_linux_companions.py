"""torchvision and torchaudio beside the linux CUDA torch, end to end as a user runs it (issue 28):
`python pipeline.py --cuda 12.8 --py 3.11`. The pin step takes torch 2.10.0 (PyPI's unlabelled CUDA 12.8 wheel),
which pairs with torchvision 0.25.0 and torchaudio 2.10.0, PyPI's CUDA 12.8 builds: each relabelled +cu128, repaired
with torch's libraries and its declared nvidia-* requirements' left to them, packaged pinning the cell's exact
pytorch build, verified (TB111, TB112 on ELF, the joint solve TB302), smoked beside torch on this host (no GPU: the
CUDA checks say skipped) and published in one channel that pip (with PyPI for the nvidia-* requirements) and
py-rattler both serve all three from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPODATA, ROOT

CELL = "linux-64-cuda12.8-py3.11"
BUILD = "py3.11_cuda12.8_cudnn9_0"
PIN = f"pytorch 2.10.0 {BUILD}"
VISION = "torchvision-0.25.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
AUDIO = "torchaudio-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
CONDAS = {"torchvision": f"torchvision-0.25.0-{BUILD}.conda", "torchaudio": f"torchaudio-2.10.0-{BUILD}.conda"}
TORCH_CONDA = f"pytorch-2.10.0-{BUILD}.conda"


def _checks(workspace: Path, stage: str) -> list[dict[str, str]]:
    report = json.loads((workspace / "build" / "report.json").read_text())
    found = next(s for s in report["cells"][0]["stages"] if s["stage"] == stage)
    return list(found["checks"])


# A 915 MB torch wheel (cached once), 3 GB of nvidia-* requirements installed into two fresh environments and a 1 GB
# conda package: many minutes on 2 cores, so the nightly runs it; tests/unit/test_linux_companion.py and
# test_companions.py run in CI.
@pytest.mark.slow
@pytest.mark.nightly
def test_linux_cuda_cell_ships_torchvision_and_torchaudio_from_one_channel(tmp_path: Path) -> None:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--cuda", "12.8", "--py", "3.11", "--matrix",
            str(ROOT / "matrix.yaml"), "--repodata", str(REPODATA), "--compression-level", "1"]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]

    assert (
        f"torchvision 0.25.0: paired (requires torch==2.10.0; PyPI's torchvision-0.25.0-cp311-cp311-manylinux_2_28_"
        f"x86_64.whl), the stages build {CONDAS['torchvision']}, which requires {PIN}"
    ) in out
    assert "its torchvision/version.py says '0.25.0+cu128': re-versioned to 0.25.0+cu128" in out
    repair = next(line for line in out.splitlines() if line.startswith("✓ repair"))
    vision = repair[repair.index(f"{VISION}: auditwheel") :]
    assert vision.startswith(f"{VISION}: auditwheel: already manylinux_2_28_x86_64, nothing to graft")
    assert ("left to torch: libc10.so, libc10_cuda.so, libtorch.so, libtorch_cpu.so, libtorch_cuda.so, "
            "libtorch_python.so; left to torch's declared requirements: libcudart.so.12") in vision  # fmt: skip
    assert "libnvjpeg.8dd2b5e6.so.12, libpng16.c2edc9e1.so.16" in vision and ", 0 missing" in vision
    assert f"{AUDIO}: auditwheel: already manylinux_2_28_x86_64" in repair

    work = tmp_path / "build" / CELL
    with zipfile.ZipFile(work / "repair" / VISION) as archive:
        names = archive.namelist()
        sbom = json.loads(archive.read("torchvision-0.25.0+cu128.dist-info/sboms/torchbuild.cdx.json"))
    assert not [n for n in names if "libtorch" in n or "libc10" in n or n.startswith("nvidia/")]
    upstream = next(c for c in sbom["components"] if c["name"] == "torchvision")
    listed = {f["name"] for f in upstream["components"]}
    assert {"torchvision.libs/libnvjpeg.8dd2b5e6.so.12", "torchvision.libs/libpng16.c2edc9e1.so.16"} <= listed

    verify = {(c["code"], Path(c["file"]).name): c for c in _checks(tmp_path, "verify")}
    for conda in CONDAS.values():
        for code in ("TB111", "TB112"):
            assert verify[(code, conda)]["status"] == "passed", verify[(code, conda)]
        assert PIN in verify[("TB111", conda)]["message"]
    assert "from torch's package: libc10.so" in verify[("TB112", CONDAS["torchvision"])]["message"]
    joint = verify[("TB302", TORCH_CONDA)]
    assert joint["status"] == "passed", joint
    assert joint["message"].startswith(
        f"pytorch-2.10.0-{BUILD} and torchaudio-2.10.0-{BUILD} and torchvision-0.25.0-{BUILD} from "
    )

    for kind in ("wheel", "conda"):
        smoke = {c["name"]: c for c in _checks(tmp_path, f"smoke-{kind}")}
        imported = smoke[f"{kind}: torchaudio import"]
        assert imported["status"] == "passed" and imported["message"].startswith("torchaudio 2.10.0+cu128 from ")
        assert "1000 Hz sine at 16000 Hz: peak at 1000 Hz" in smoke[f"{kind}: torchaudio spectrogram"]["message"]

    channel = tmp_path / "channel"
    for conda in (TORCH_CONDA, *CONDAS.values()):
        assert (channel / "linux-64" / conda).is_file()
    simple = channel / "whl" / "simple"
    assert (simple / "torchvision" / VISION).is_file() and (simple / "torchaudio" / AUDIO).is_file()
    requirements = tmp_path / "requirements.in"
    requirements.write_text("torch\ntorchvision\ntorchaudio\n")
    compiled = subprocess.run(
        ["uv", "pip", "compile", str(requirements), "--no-config", "--no-header", "--emit-index-annotation",
         "--index", simple.as_uri(), "--default-index", "https://pypi.org/simple", "--python-platform",
         "x86_64-manylinux_2_28", "--python-version", "3.11"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    lines = compiled.stdout.splitlines()
    for pinned in ("torch==2.10.0+cu128", "torchvision==0.25.0+cu128", "torchaudio==2.10.0+cu128"):
        index = next(line for line in lines[lines.index(pinned) + 1 :] if line.startswith("    # from "))
        assert index == f"    # from {simple.as_uri()}", compiled.stdout
    assert "nvidia-cuda-runtime-cu12==12.8.90" in lines
