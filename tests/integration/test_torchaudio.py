"""torchaudio beside torch and torchvision on a win-64 CPU cell, end to end as a user runs it (issue 28):
`python pipeline.py --platform win-64 --cuda cpu --py 3.11 --torch 2.5.1 --packages torch,torchvision,torchaudio`
with Wine, so verify's loader checks and both smoke environments run. torch 2.5.1 pairs with torchaudio 2.5.1, whose
win_amd64 wheel has torio's FFmpeg extensions: their FFmpeg imports are named as loaded on demand, nothing else is
missing. The one publish serves all three to py-rattler (solve + install)."""

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

CELL = "win-64-cpu-py3.11-torch2.5.1"
AUDIO = "torchaudio-2.5.1-cp311-cp311-win_amd64.whl"
AUDIO_CONDA = "torchaudio-2.5.1-py3.11_cpu_0.conda"
PIN = "pytorch 2.5.1 py3.11_cpu_0"
FFMPEG = (
    "avcodec-58.dll, avcodec-59.dll, avcodec-60.dll, avdevice-58.dll, avdevice-59.dll, avdevice-60.dll, "
    "avfilter-7.dll, avfilter-8.dll, avfilter-9.dll, avformat-58.dll, avformat-59.dll, avformat-60.dll, "
    "avutil-56.dll, avutil-57.dll, avutil-58.dll"
)
ON_DEMAND = f"loaded on demand: {FFMPEG} (FFmpeg, not shipped)"


def _checks(workspace: Path, stage: str) -> list[dict[str, str]]:
    report = json.loads((workspace / "build" / "report.json").read_text())
    found = next(s for s in report["cells"][0]["stages"] if s["stage"] == stage)
    return list(found["checks"])


# About 6.5 minutes on 2 cores (the whole win-64 cell of three packages under Wine): the nightly runs it, so that
# CI stays within its time; the unit tests of tests/unit/test_on_demand.py run in CI.
@pytest.mark.slow
@pytest.mark.nightly
def test_torchaudio_goes_through_every_stage_beside_torch_and_torchvision(tmp_path: Path) -> None:
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", "win-64", "--cuda", "cpu", "--py", "3.11",
            "--torch", "2.5.1", "--packages", "torch,torchvision,torchaudio", "--matrix", str(ROOT / "matrix.yaml"),
            "--repodata", str(REPODATA), "--compression-level", "1"]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]

    # what the run says of torchaudio: the plan line, the source, the repair with its on-demand DLLs named
    assert (
        f"torchaudio 2.5.1: paired (requires torch==2.5.1; PyPI's {AUDIO}), the stages build {AUDIO_CONDA}, which "
        f"requires {PIN}"
    ) in out
    assert f"{AUDIO} (2.4 MB, sha256 as torchbuild/data/companions.yaml pins)" in out
    repair = next(line for line in out.splitlines() if line.startswith("✓ repair"))
    mine = repair[repair.index(f"{AUDIO}: vendored") :]
    assert mine.startswith(f"{AUDIO}: vendored ")
    assert "into torchaudio.libs; 11 DLLs of torch's wheel left to torch" in mine
    assert f"0 missing; {ON_DEMAND}" in mine

    # verify: its pin, its closure and its loads beside torch's package; the joint solve of all three
    verify = {(c["code"], Path(c["file"]).name): c for c in _checks(tmp_path, "verify")}
    for code in ("TB111", "TB112", "TB113"):
        assert verify[(code, AUDIO_CONDA)]["status"] == "passed", verify[(code, AUDIO_CONDA)]
    assert ON_DEMAND in verify[("TB112", AUDIO_CONDA)]["message"]
    loaded = verify[("TB113", AUDIO_CONDA)]["message"]
    assert "files loaded beside torch's package under Wine" in loaded
    assert "(FFmpeg, not shipped) by Lib/site-packages/torio/lib/_torio_ffmpeg4.pyd" in loaded
    assert verify[("TB302", "pytorch-2.5.1-py3.11_cpu_0.conda")]["message"].startswith(
        "pytorch-2.5.1-py3.11_cpu_0 and torchaudio-2.5.1-py3.11_cpu_0 and torchvision-0.20.1-py3.11_cpu_0 from "
    )

    # smoke: torchaudio's and torchvision's checks in both fresh environments under Wine
    for kind in ("wheel", "conda"):
        smoke = {c["name"]: c for c in _checks(tmp_path, f"smoke-{kind}")}
        assert smoke[f"{kind}: torchaudio import"]["status"] == "passed", smoke[f"{kind}: torchaudio import"]
        assert smoke[f"{kind}: torchaudio import"]["message"].startswith("torchaudio 2.5.1+cpu from ")
        assert "its C++ extension loaded" in smoke[f"{kind}: torchaudio import"]["message"]
        assert "1000 Hz sine at 16000 Hz: peak at 1000 Hz" in smoke[f"{kind}: torchaudio spectrogram"]["message"]
        assert "resample 16000 -> 8000 Hz: 8000 samples" in smoke[f"{kind}: torchaudio resample"]["message"]
        # torchvision's beside them (pillow, its requirement, installed too)
        assert smoke[f"{kind}: torchvision import"]["message"].startswith("torchvision 0.20.1+cpu from ")
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
    for conda in ("pytorch-2.5.1-py3.11_cpu_0.conda", "torchvision-0.20.1-py3.11_cpu_0.conda", AUDIO_CONDA):
        assert (channel / "win-64" / conda).is_file()
    assert (channel / "whl" / "simple" / "torchaudio" / AUDIO).is_file()
    script = tmp_path / "install.py"
    script.write_text(WIN_INSTALL)
    prefix = tmp_path / "prefix"
    installed = subprocess.run(
        [sys.executable, str(script), channel.as_uri(), (REPODATA / "conda-forge").as_uri(), str(prefix),
         "pytorch", "torchvision", "torchaudio", "python 3.11.*"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"torchaudio 2.5.1 py3.11_cpu_0 {channel.as_uri()}" in installed.stdout
    assert "installed pytorch, torchaudio, torchvision" in installed.stdout
    assert (prefix / "Lib" / "site-packages" / "torchaudio" / "lib" / "libtorchaudio.pyd").is_file()
