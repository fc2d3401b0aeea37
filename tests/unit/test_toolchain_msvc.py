"""Visual Studio discovery and MSVC activation on recorded vswhere / folder / vcvarsall output (tests/data/toolchain).

The OS calls (vswhere.exe, cmd.exe) cannot run here; everything that reads their output does, on realistic
recordings: three modern installs plus VS 2015 from -legacy, toolset folders, a vcvarsall `set` dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import torch_plan
from torchbuild.platforms.toolchain import ToolchainError
from torchbuild.platforms.windows import msvc, traps

DATA = Path(__file__).resolve().parent.parent / "data" / "toolchain"


def recorded_installs() -> list[msvc.VsInstall]:
    modern = msvc.parse_vswhere((DATA / "vswhere-products.json").read_text(encoding="utf-8"))
    legacy = msvc.parse_vswhere((DATA / "vswhere-legacy.json").read_text(encoding="utf-8"), legacy=True)
    return msvc.merge_installs(modern, legacy)


def installed(tmp_path: Path) -> list[tuple[msvc.VsInstall, list[str]]]:
    """The recorded installs with their toolset folders made real under tmp_path (toolsets_of reads folders)."""
    listing = json.loads((DATA / "msvc-toolsets.json").read_text(encoding="utf-8"))
    result = []
    for install in recorded_installs():
        local = tmp_path / install.path.replace(":", "").replace("\\", "/").strip("/")
        if install.legacy:
            (local / "VC").mkdir(parents=True, exist_ok=True)
            (local / "VC" / "vcvarsall.bat").write_text("@echo off\n")
        for name in listing[install.path]:
            (local / "VC" / "Tools" / "MSVC" / name).mkdir(parents=True, exist_ok=True)
        on_disk = msvc.VsInstall(str(local), install.version, install.display_version, install.name, install.legacy)
        result.append((install, msvc.toolsets_of(on_disk)))
    return result


def test_vswhere_modern_and_legacy_merge() -> None:
    installs = recorded_installs()
    assert [i.name for i in installs] == [
        "Visual Studio Enterprise 2022",
        "Visual Studio Build Tools 2022",
        "Visual Studio Build Tools 2019",
        "Visual Studio 14.0",
    ]
    assert [i.update for i in installs] == ["17.9.6", "17.4.1", "16.11.34", "14.0"]
    assert [i.legacy for i in installs] == [False, False, False, True]


def test_vswhere_garbage_is_a_clear_error() -> None:
    with pytest.raises(ToolchainError, match="not JSON"):
        msvc.parse_vswhere("Visual Studio Locator version 3.1.7\nerror 0x57: -legacy cannot be used with -products")
    assert msvc.parse_vswhere("") == []


def test_toolset_folders(tmp_path: Path) -> None:
    found = {i.name: t for i, t in installed(tmp_path)}
    assert found["Visual Studio Enterprise 2022"] == ["14.29.30133", "14.38.33130", "14.39.33519"]
    assert found["Visual Studio Build Tools 2019"] == ["14.16.27023", "14.29.30133"]  # v142.props is no toolset
    assert found["Visual Studio 14.0"] == ["14.0"]


def test_plan_toolset_installed_exactly(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "11.8", "3.10", "2.0.1")  # nvcc 11.8 accepts 14.10-14.39; the Plan pins 14.39
    choice = msvc.choose_toolset(installed(tmp_path), plan.toolchain)
    assert (choice.toolset, choice.full) == ("14.39", "14.39.33519")
    assert choice.vcvarsall.endswith(r"2022\Enterprise\VC\Auxiliary\Build\vcvarsall.bat")
    assert choice.args == ("x64", "-vcvars_ver=14.39")
    assert choice.note == ""


def test_plan_toolset_missing_falls_back_inside_the_accepted_range(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "12.4", "3.11", "2.5.1")  # Plan: 14.44 (newest known), accepted 14.10-14.44
    choice = msvc.choose_toolset(installed(tmp_path), plan.toolchain)
    assert choice.full == "14.39.33519"
    assert "14.44 is not installed" in choice.note and "14.10-14.44" in choice.note


def test_vs2015_toolset_through_a_newer_vcvarsall(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "8.0", "3.6", "0.4.0")
    choice = msvc.choose_toolset(installed(tmp_path), plan.toolchain)
    assert choice.toolset == "14.0"
    assert choice.args == ("x64", "-vcvars_ver=14.0")
    assert "2022" in choice.vcvarsall


def test_vs2015_alone_uses_its_own_vcvarsall(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "8.0", "3.6", "0.4.0")
    only_2015 = [row for row in installed(tmp_path) if row[0].legacy]
    choice = msvc.choose_toolset(only_2015, plan.toolchain)
    assert choice.vcvarsall == r"C:\Program Files (x86)\Microsoft Visual Studio 14.0\VC\vcvarsall.bat"
    assert choice.args == ("amd64",)


def test_no_visual_studio_is_a_clear_error() -> None:
    plan = torch_plan("win-64", "12.4", "3.11", "2.5.1")
    with pytest.raises(ToolchainError) as err:
        msvc.choose_toolset([], plan.toolchain)
    assert "no Visual Studio installation found" in str(err.value)
    assert "Desktop development with C++" in str(err.value)


def test_wrong_toolset_only_names_the_range_and_the_fix(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "9.0", "3.6", "1.1.0")  # nvcc 9.0 accepts up to 14.11
    rows = [row for row in installed(tmp_path) if not row[0].legacy]
    with pytest.raises(ToolchainError) as err:
        msvc.choose_toolset(rows, plan.toolchain)
    message = str(err.value)
    assert "needs 14.11" in message and "accepts 14.0-14.11" in message
    assert "14.39.33519 (Visual Studio Enterprise 2022)" in message
    assert "v14.11" in message  # the installer component to add


def test_vcvarsall_set_dump_gives_the_delta() -> None:
    before = json.loads((DATA / "vcvars-before.json").read_text(encoding="utf-8"))
    output = (DATA / "vcvarsall-x64-14.39.txt").read_text(encoding="utf-8")
    after = msvc.parse_set_output(output)
    delta = msvc.env_delta(before, after)
    assert delta["VCTOOLSVERSION"] == "14.39.33519"
    assert delta["PATH"].startswith(r"C:\Program Files\Microsoft Visual Studio\2022\Enterprise\VC\Tools\MSVC")
    assert "INCLUDE" in delta and "LIB" in delta
    assert "CUDA_PATH_V12_4" not in delta and "COMPUTERNAME" not in delta  # unchanged variables stay out
    assert not any("Developer Command Prompt" in k for k in after)  # the banner is not read as variables
    choice = msvc.ToolsetChoice(
        recorded_installs()[0], "14.39", "14.39.33519", "vcvarsall.bat", ("x64", "-vcvars_ver=14.39"))
    msvc.check_vcvars(output, delta, choice)  # accepted


def test_vcvarsall_errors_are_fatal() -> None:
    output = (DATA / "vcvarsall-error-14.29.txt").read_text(encoding="utf-8")
    choice = msvc.ToolsetChoice(
        recorded_installs()[0], "14.29", "14.29.30133", r"C:\VS\vcvarsall.bat", ("x64", "-vcvars_ver=14.29"))
    with pytest.raises(ToolchainError) as err:
        msvc.check_vcvars(output, msvc.env_delta({}, msvc.parse_set_output(output)), choice)
    assert "Toolset directory for version '14.29' was not found" in str(err.value)
    assert "install MSVC toolset 14.29" in str(err.value)


def test_vcvarsall_activating_another_toolset_is_refused() -> None:
    before = json.loads((DATA / "vcvars-before.json").read_text(encoding="utf-8"))
    output = (DATA / "vcvarsall-x64-14.39.txt").read_text(encoding="utf-8")
    delta = msvc.env_delta(before, msvc.parse_set_output(output))
    choice = msvc.ToolsetChoice(
        recorded_installs()[0], "14.38", "14.38.33130", "vcvarsall.bat", ("x64", "-vcvars_ver=14.38"))
    with pytest.raises(ToolchainError, match=r"activated MSVC 14\.39\.33519, not 14\.38"):
        msvc.check_vcvars(output, delta, choice)


def test_vcvars_command_line() -> None:
    choice = msvc.ToolsetChoice(
        recorded_installs()[0], "14.39", "14.39.33519", r"C:\VS\vcvarsall.bat", ("x64", "-vcvars_ver=14.39"))
    assert msvc.vcvars_command(choice) == (
        f'"call "C:\\VS\\vcvarsall.bat" x64 -vcvars_ver=14.39 && echo {msvc.ENV_MARKER} && set"'
    )


def test_known_bad_lnk1161_update_is_flagged(tmp_path: Path) -> None:
    plan = torch_plan("win-64", "12.4", "3.11", "2.5.1")
    build_tools_17_4_1 = recorded_installs()[1]
    results = traps.check("14.34.31933", build_tools_17_4_1, plan.toolchain)
    bad = [r for r in results if not r.found]
    assert len(bad) == 1 and "LNK1161" in bad[0].detail and "17.4.3" in bad[0].fix
    assert plan.toolchain.nvcc == "12.4"


def test_msvc_too_new_for_cuda_is_flagged_with_the_table() -> None:
    enterprise = recorded_installs()[0]
    cuda_12_1 = torch_plan("win-64", "12.1", "3.11", "2.5.1").toolchain
    results = traps.check("14.40.33807", enterprise, cuda_12_1)
    bad = [r for r in results if not r.found]
    assert len(bad) == 1
    assert "newer than nvcc 12.1 accepts (14.10-14.39)" in bad[0].detail
    assert "CUDA 12.4: MSVC 14.10-14.44" in bad[0].detail
    ok = traps.check("14.39.33519", enterprise, cuda_12_1)
    assert all(r.found for r in ok)
