"""torchaudio beside torch and torchvision on a win-64 CPU cell, end to end as a user runs it (issue 28):
`python pipeline.py --platform win-64 --cuda cpu --py 3.11 --torch <release> --packages torch,torchvision,torchaudio`
with Wine, so verify's loader checks and both smoke environments run.

- torch 2.5.1 pairs with torchaudio 2.5.1, but torch's DLLs import Intel's OpenMP (libiomp5md.dll) and torchaudio's
  libtorchaudio.pyd MSVC's (vcomp140.dll): `import torch, torchaudio` would load two runtimes, and the plan refuses
  it before anything runs (seconds, in CI).
- torch 2.11.0 pairs with torchaudio 2.11.0, which imports no OpenMP runtime: every stage passes, and the one
  publish serves all three to py-rattler (solve + install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPODATA, ROOT
from tests.integration.test_windows import WIN_INSTALL
from torchbuild.platforms.windows import wine


def _pipeline(workspace: Path, torch: str) -> str:
    """The win-64 cell of ``torch`` with all three packages, run as a user runs it; its output."""
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", "win-64", "--cuda", "cpu", "--py", "3.11",
            "--torch", torch, "--packages", "torch,torchvision,torchaudio", "--matrix", str(ROOT / "matrix.yaml"),
            "--repodata", str(REPODATA), "--compression-level", "1"]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, env=env, check=False)
    return f"exit {result.returncode}\n" + result.stdout + result.stderr


def _checks(workspace: Path, stage: str) -> list[dict[str, str]]:
    report = json.loads((workspace / "build" / "report.json").read_text())
    found = next(s for s in report["cells"][0]["stages"] if s["stage"] == stage)
    return list(found["checks"])


# Each about 6.5 minutes on 2 cores (a win-64 cell of three packages under Wine): the nightly runs them, so that CI
# stays within its time; the unit tests of tests/unit/test_on_demand.py and tests/unit/test_openmp.py run in CI.
def test_torch_2_5_1_with_torchaudio_named_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """torch 2.5.1's DLLs import Intel's OpenMP (libiomp5md.dll), torchaudio 2.5.1's libtorchaudio.pyd MSVC's
    (vcomp140.dll): `import torch, torchaudio` would load two runtimes. Named in --packages, torchaudio is refused by
    the plan (companions.yaml's openmp data, read from both wheels); verify's TB114 would stop the artifacts."""
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", "win-64", "--cuda", "cpu", "--py", "3.11",
            "--torch", "2.5.1", "--packages", "torch,torchvision,torchaudio", "--matrix", str(ROOT / "matrix.yaml")]
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert (
        "torchaudio cannot ship with torch 2.5.1+cpu (win-64, Python 3.11): PyPI's win-64 wheel of torchaudio 2.5.1 "
        "imports vcomp140.dll and torch 2.5.1's imports libiomp5md.dll"
    ) in result.stderr
    assert "Leave torchaudio out of packages" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.slow
@pytest.mark.nightly
def test_torchaudio_goes_through_every_stage_beside_torch_and_torchvision(tmp_path: Path) -> None:
    audio, audio_conda = "torchaudio-2.11.0-cp311-cp311-win_amd64.whl", "torchaudio-2.11.0-py3.11_cpu_0.conda"
    torch_conda, vision_conda = "pytorch-2.11.0-py3.11_cpu_0.conda", "torchvision-0.26.0-py3.11_cpu_0.conda"
    out = _pipeline(tmp_path, "2.11.0")
    assert out.startswith("exit 0"), out[-4000:]
    assert (
        f"torchaudio 2.11.0: paired (declares no torch requirement; PyPI's {audio}), the stages build {audio_conda}, "
        "which requires pytorch 2.11.0 py3.11_cpu_0"
    ) in out

    # verify: its pin, its closure and its loads beside torch's package; one OpenMP runtime; the joint solve
    verify = {(c["code"], Path(c["file"]).name): c for c in _checks(tmp_path, "verify")}
    for code in ("TB111", "TB112", "TB113"):
        assert verify[(code, audio_conda)]["status"] == "passed", verify[(code, audio_conda)]
    assert "files loaded beside torch's package under Wine" in verify[("TB113", audio_conda)]["message"]
    joint = verify[("TB114", torch_conda)]
    assert joint["status"] == "passed" and joint["message"].startswith(
        "import torch, torchvision, torchaudio: libiomp5md.dll (Intel's OpenMP) imported by torch ("
    ), joint
    assert verify[("TB302", torch_conda)]["message"].startswith(
        "pytorch-2.11.0-py3.11_cpu_0 and torchaudio-2.11.0-py3.11_cpu_0 and torchvision-0.26.0-py3.11_cpu_0 from "
    )

    # smoke: torchaudio's and torchvision's checks in both fresh environments under Wine
    for kind in ("wheel", "conda"):
        smoke = {c["name"]: c for c in _checks(tmp_path, f"smoke-{kind}")}
        assert smoke[f"{kind}: torchaudio import"]["status"] == "passed", smoke[f"{kind}: torchaudio import"]
        assert smoke[f"{kind}: torchaudio import"]["message"].startswith("torchaudio 2.11.0")
        assert "its C++ extension loaded" in smoke[f"{kind}: torchaudio import"]["message"]
        assert "1000 Hz sine at 16000 Hz: peak at 1000 Hz" in smoke[f"{kind}: torchaudio spectrogram"]["message"]
        assert "resample 16000 -> 8000 Hz: 8000 samples" in smoke[f"{kind}: torchaudio resample"]["message"]
        # torchvision's beside them (pillow, its requirement, installed too)
        assert smoke[f"{kind}: torchvision import"]["message"].startswith("torchvision 0.26.0+cpu from ")
        assert "(its C++ operators registered (torch.ops.torchvision.nms))" in smoke[f"{kind}: torchvision import"][
            "message"
        ]
        assert smoke[f"{kind}: torchvision nms"]["message"] == (
            "nms of 4 boxes: IoU 0.5: kept [0, 2]; IoU 0.75: kept [0, 1, 2]; IoU 0.95: kept [0, 1, 2, 3]; "
            "roi_align over (0, 0)-(3, 3) of 4y + x: 7.5"
        )
        assert "PNG 113 bytes, decoded exactly; JPEG (quality 95)" in smoke[f"{kind}: torchvision image io"]["message"]
        assert smoke[f"{kind}: torchvision transforms"]["message"].startswith("v1 and v2: CenterCrop(20), flip")
        assert "output (1, 1000), finite, the same twice" in smoke[f"{kind}: torchvision model"]["message"]
        assert all(c["status"] == "passed" for name, c in smoke.items() if "torchvision" in name), smoke

    # the one publish: all three in the channel; py-rattler solves and installs them together
    channel = tmp_path / "channel"
    for conda in (torch_conda, vision_conda, audio_conda):
        assert (channel / "win-64" / conda).is_file()
    assert (channel / "whl" / "simple" / "torchaudio" / audio).is_file()
    script = tmp_path / "install.py"
    script.write_text(WIN_INSTALL)
    prefix = tmp_path / "prefix"
    installed = subprocess.run(
        [sys.executable, str(script), channel.as_uri(), (REPODATA / "conda-forge").as_uri(), str(prefix),
         "pytorch", "torchvision", "torchaudio", "python 3.11.*"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"torchaudio 2.11.0 py3.11_cpu_0 {channel.as_uri()}" in installed.stdout
    assert "installed pytorch, torchaudio, torchvision" in installed.stdout
    assert (prefix / "Lib" / "site-packages" / "torchaudio" / "lib" / "libtorchaudio.pyd").is_file()
