"""DLLs a companion loads only where installed (companions.yaml ``on_demand``: torchaudio's FFmpeg DLLs on win-64):
the table, the Plan, and the rule both closure checks apply (repair's PE closure, verify's Wine loader check): such a
DLL passes and is named, any other missing DLL still fails, named."""

from __future__ import annotations

import pytest

from torchbuild.config.matrix import Cell, Matrix
from torchbuild.errors import UserError
from torchbuild.knowledge import companions, datafiles
from torchbuild.plan import resolve
from torchbuild.platforms.windows import pe
from torchbuild.platforms.windows.loadcheck import Loaded
from torchbuild.stages.smoke.resources import smoke_checks
from torchbuild.stages.verify.loader import on_demand_note, on_demand_split

FFMPEG_6 = ("avutil-58.dll", "avcodec-60.dll", "avformat-60.dll", "avfilter-9.dll", "avdevice-60.dll")
TORIO = "torio/lib/libtorio_ffmpeg6.pyd"


def test_the_table_names_ffmpegs_dlls_for_torchaudios_win_wheels_with_ffmpeg_extensions() -> None:
    table = companions.load()
    build = table.release("torchaudio", "2.5.1").builds["win-64"]
    assert list(build.on_demand) == ["FFmpeg"]
    assert set(FFMPEG_6) < set(build.on_demand["FFmpeg"]) and len(build.on_demand["FFmpeg"]) == 15
    assert build.on_demand_dlls["avutil-56.dll"] == "FFmpeg"
    assert not table.release("torchaudio", "2.9.0").builds["win-64"].on_demand  # no FFmpeg extension from 2.9.0
    assert not table.release("torchaudio", "2.5.1").builds["linux-64"].on_demand
    assert not table.release("torchvision", "0.20.1").builds["win-64"].on_demand


@pytest.mark.parametrize(
    ("on_demand", "message"),
    [
        (["avutil-58.dll"], "torchaudio 2.5.1 win-64 on_demand: give {library: [DLL names]}"),
        ({"FFmpeg": ["avutil-58"]}, "torchaudio 2.5.1 win-64 on_demand FFmpeg: 'avutil-58' is not a DLL name"),
        ({"FFmpeg": "avutil-58.dll"}, "torchaudio 2.5.1 win-64 on_demand FFmpeg: must be a list"),
        ({"FFmpeg": ["avutil-58.dll"], "libav": ["AVUTIL-58.dll"]},
         "AVUTIL-58.dll is listed under both FFmpeg and libav"),
    ],
)  # fmt: skip
def test_a_bad_on_demand_entry_is_refused_naming_the_row(on_demand: object, message: str) -> None:
    raw = {"packages": datafiles.raw(companions.DATA_FILE)["packages"],
           "torchaudio": {"2.5.1": {"win-64": {"on_demand": on_demand}}}}  # fmt: skip
    with pytest.raises(UserError) as info:
        companions._parse(raw)
    assert str(info.value).startswith("torchbuild/data/companions.yaml: torchaudio 2.5.1 win-64 on_demand")
    assert message in str(info.value)


def test_a_win_64_plan_builds_torchaudio_and_carries_what_it_loads_on_demand() -> None:
    # torch 2.3.1 and torchaudio 2.3.1 share their OpenMP runtime (vcomp140.dll): torchaudio ships beside it
    plan = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.3.1"), Matrix())
    vision, audio = plan.companions
    assert audio.built and audio.package == "torchaudio-2.3.1-py3.11_cpu_0"
    assert audio.depends == ("python >=3.11,<3.12.0a0", "pytorch 2.3.1 py3.11_cpu_0")
    assert audio.line == (
        "torchaudio 2.3.1: paired (requires torch==2.3.1; PyPI's torchaudio-2.3.1-cp311-cp311-win_amd64.whl), "
        "the stages build torchaudio-2.3.1-py3.11_cpu_0.conda, which requires pytorch 2.3.1 py3.11_cpu_0"
    )
    assert audio.on_demand_dlls["avformat-60.dll"] == "FFmpeg" and len(audio.on_demand_dlls) == 15
    assert vision.built and not vision.on_demand
    assert plan.to_dict()["companions"][1]["on_demand"][0][0] == "FFmpeg"


def _torio(*imports: str) -> pe.PeInfo:
    return pe.PeInfo(path=TORIO, machine="AMD64", imports=("c10.dll", "KERNEL32.dll", *imports), delay_imports=())


def _closure(info: pe.PeInfo) -> pe.ClosureReport[pe.PeInfo]:
    plan = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.3.1"), Matrix())
    audio = plan.companions[1]
    files = [TORIO, "torch/lib/c10.dll"]
    return pe.resolve([info], files, python="3.11", search_dirs=["torch/lib"], on_demand=audio.on_demand_dlls)


def test_the_closure_accepts_a_dll_loaded_on_demand_and_names_it() -> None:
    report = _closure(_torio("avutil-58.dll", "AVCODEC-60.dll"))
    assert report.ok and not report.missing
    summary = report.summary()
    assert "0 missing; loaded on demand: avcodec-60.dll, avutil-58.dll (FFmpeg, not shipped)" in summary
    assert all(c.status == "passed" for c in report.checks())


def test_the_closure_still_fails_for_any_other_missing_dll_naming_it() -> None:
    report = _closure(_torio("avutil-58.dll", "avutil-99.dll", "libsox.dll"))
    assert not report.ok
    assert report.missing_names == ("avutil-99.dll", "libsox.dll")
    summary = report.summary()
    assert "2 missing (avutil-99.dll, libsox.dll); loaded on demand: avutil-58.dll (FFmpeg, not shipped)" in summary
    failed = [c for c in report.checks() if c.status == "failed"]
    assert any(f"{TORIO} imports avutil-99.dll, which is neither in the wheel" in c.message for c in failed)


def test_without_on_demand_data_an_ffmpeg_dll_is_missing() -> None:
    report = pe.resolve([_torio("avutil-58.dll")], [TORIO, "torch/lib/c10.dll"], python="3.11",
                        search_dirs=["torch/lib"])  # fmt: skip
    assert report.missing_names == ("avutil-58.dll",)


def test_the_loader_check_accepts_a_load_that_failed_only_for_dlls_loaded_on_demand() -> None:
    on_demand = {dll: "FFmpeg" for dll in FFMPEG_6}
    ffmpeg = Loaded(TORIO, 126, (f"avutil-58.dll (needed by {TORIO})", f"avcodec-60.dll (needed by {TORIO})"))
    sox = Loaded("torchaudio/lib/libtorchaudio_sox.pyd", 126, ("libsox.dll (needed by torchaudio/lib/x.pyd)",))
    mixed = Loaded("torio/lib/_torio_ffmpeg6.pyd", 126, ("avutil-58.dll (needed by a)", "libsox.dll (needed by a)"))
    export = Loaded("torio/lib/_torio_ffmpeg5.pyd", 127, ("avutil-58.dll.av_log (imported by a)",))
    accepted, failed = on_demand_split([ffmpeg, sox, mixed, export], on_demand)
    assert accepted == [ffmpeg]
    assert failed == [sox, mixed, export]
    assert on_demand_note(accepted, on_demand) == (
        f"loaded on demand: avcodec-60.dll, avutil-58.dll (FFmpeg, not shipped) by {TORIO}"
    )
    assert "libsox.dll (needed by" in sox.describe()


def test_torchaudios_smoke_checks_run_only_where_it_is_installed() -> None:
    audio = ["torchaudio import", "torchaudio spectrogram", "torchaudio resample"]
    assert not set(audio) & set(smoke_checks.check_names())
    assert smoke_checks.check_names(["torchvision", "torchaudio"])[-3:] == audio
    assert sum(name in group for group in smoke_checks.PROCESSES for name in smoke_checks.CHECKS) == len(
        smoke_checks.CHECKS
    )
