"""torchaudio beside torch and torchvision on a win-64 CPU cell, end to end as a user runs it (issue 28):
`python pipeline.py --platform win-64 --cuda cpu --py 3.11 --torch <release> --packages torch,torchvision,torchaudio`
with Wine, so verify's loader checks and both smoke environments run.

- torch 2.5.1 pairs with torchaudio 2.5.1, whose win_amd64 wheel has torio's FFmpeg extensions: their FFmpeg imports
  are named as loaded on demand, nothing else is missing; but torch's DLLs import Intel's OpenMP (libiomp5md.dll) and
  torchaudio's libtorchaudio.pyd MSVC's (vcomp140.dll): `import torch, torchaudio` loads two runtimes, and verify's
  TB114 stops the cell before anything is published.
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

FFMPEG = (
    "avcodec-58.dll, avcodec-59.dll, avcodec-60.dll, avdevice-58.dll, avdevice-59.dll, avdevice-60.dll, "
    "avfilter-7.dll, avfilter-8.dll, avfilter-9.dll, avformat-58.dll, avformat-59.dll, avformat-60.dll, "
    "avutil-56.dll, avutil-57.dll, avutil-58.dll"
)
ON_DEMAND = f"loaded on demand: {FFMPEG} (FFmpeg, not shipped)"


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
@pytest.mark.slow
@pytest.mark.nightly
def test_torch_2_5_1_with_torchaudio_stops_at_verify_two_openmp_runtimes_in_one_process(tmp_path: Path) -> None:
    audio, audio_conda = "torchaudio-2.5.1-cp311-cp311-win_amd64.whl", "torchaudio-2.5.1-py3.11_cpu_0.conda"
    out = _pipeline(tmp_path, "2.5.1")
    assert out.startswith("exit 1"), out[-4000:]
    assert (
        f"torchaudio 2.5.1: paired (requires torch==2.5.1; PyPI's {audio}), the stages build {audio_conda}, which "
        "requires pytorch 2.5.1 py3.11_cpu_0"
    ) in out
    repair = next(line for line in out.splitlines() if line.startswith("✓ repair"))
    mine = repair[repair.index(f"{audio}: vendored") :]
    assert "into torchaudio.libs; 11 DLLs of torch's wheel left to torch" in mine
    assert f"0 missing; {ON_DEMAND}" in mine

    # each package alone passes; together they load Intel's OpenMP (torch) and MSVC's vcomp (torchaudio)
    verify = {(c["code"], Path(c["file"]).name): c for c in _checks(tmp_path, "verify")}
    for code in ("TB111", "TB112", "TB113"):
        assert verify[(code, audio_conda)]["status"] == "passed", verify[(code, audio_conda)]
    assert ON_DEMAND in verify[("TB112", audio_conda)]["message"]
    assert "(FFmpeg, not shipped) by Lib/site-packages/torio/lib/_torio_ffmpeg4.pyd" in verify[("TB113", audio_conda)][
        "message"
    ]
    joint = verify[("TB114", "pytorch-2.5.1-py3.11_cpu_0.conda")]
    assert joint["status"] == "failed"
    assert joint["message"].startswith(
        "import torch, torchvision, torchaudio loads 2 OpenMP runtimes into one process: libiomp5md.dll (Intel's "
        "OpenMP) imported by torch ("
    ), joint
    vcomp = "vcomp140.dll (MSVC's vcomp) imported by torchaudio (Lib/site-packages/torchaudio/lib/libtorchaudio.pyd)"
    assert vcomp in joint["message"]
    assert "TB114" in out and not (tmp_path / "channel" / "win-64").exists()  # nothing published


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
