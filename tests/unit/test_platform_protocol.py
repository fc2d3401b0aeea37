"""The Platform Protocol (platforms/target.py): what each platform decides for the stages, looked up by name, with
real PE and ELF files; and the stages asking it rather than comparing platform names."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.pe_fixtures import PeFixtures
from torchbuild.platforms.by_name import platform_module
from torchbuild.platforms.target import LibraryUnreadable

STAGES = Path(__file__).resolve().parents[2] / "torchbuild" / "stages"
# Modules another part of issue 41 rewrites into one per-package path; the lead routes them through the Protocol
PLATFORM_NAME = re.compile(r'"(win-64|linux-64)"|\bplatform [!=]=')


@pytest.mark.parametrize(
    ("name", "repair_tool", "windows_layout"), [("win-64", "delvewheel", True), ("linux-64", "auditwheel", False)]
)
def test_each_platform_names_its_repairer_and_conda_layout(name: str, repair_tool: str, windows_layout: bool) -> None:
    platform = platform_module(name)
    assert (platform.name, platform.repair_tool, platform.conda_windows_layout) == (name, repair_tool, windows_layout)


@pytest.mark.parametrize(
    ("name", "host", "backend"),
    [
        ("linux-64", "linux-64", "venv"),
        ("linux-64", "win-64", None),
        ("win-64", "win-64", "venv"),
        ("win-64", "linux-64", "wine"),
        ("win-64", "osx-arm64", None),
    ],
)
def test_the_smoke_backend_follows_the_host(name: str, host: str, backend: str | None) -> None:
    assert platform_module(name).smoke_backend(host) == backend


def test_a_cell_compiles_on_a_host_of_its_platform_only() -> None:
    assert platform_module("win-64").compiles_on("win-64")
    assert not platform_module("win-64").compiles_on("linux-64")
    assert platform_module("linux-64").compiles_on("linux-64")
    assert not platform_module("linux-64").compiles_on("win-64")


def test_windows_expands_percent_references_and_linux_leaves_them() -> None:
    env = {"Cuda_Path_V12_4": r"C:\CUDA\v12.4"}
    assert platform_module("win-64").expand_env(r"%CUDA_PATH_V12_4%\bin", env) == r"C:\CUDA\v12.4\bin"
    assert platform_module("linux-64").expand_env(r"%CUDA_PATH_V12_4%\bin", env) == r"%CUDA_PATH_V12_4%\bin"


def test_each_platform_reads_its_own_libraries_imports(pe_fixtures: PeFixtures) -> None:
    """PE: imports, then delay imports; ELF: DT_NEEDED (the running interpreter needs the C library)."""
    imports = platform_module("win-64").library_imports(pe_fixtures.user, "user.dll")
    assert {"base.dll", "nothere.dll", "KERNEL32.dll"} <= set(imports[:-1]) and imports[-1] == "lazy.dll"
    python = Path(os.path.realpath(sys.executable))
    assert "libc.so.6" in platform_module("linux-64").library_imports(python, "bin/python")


@pytest.mark.parametrize("name", ["win-64", "linux-64"])
def test_an_unreadable_library_is_said_in_the_readers_words(name: str, tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"not a library" * 8)
    with pytest.raises(LibraryUnreadable) as raised:
        platform_module(name).library_imports(garbage, "torch/lib/garbage.bin")
    assert str(raised.value)  # the reader's own message, which the stage puts after the file's name
    with pytest.raises(LibraryUnreadable, match="No such file"):
        platform_module(name).library_imports(tmp_path / "absent.so", "absent.so")


def test_the_plan_looks_its_platform_up_by_name() -> None:
    assert torch_plan("win-64", "cpu", "3.11", "2.5.1").platform_module.repair_tool == "delvewheel"
    assert torch_plan("linux-64", "cpu", "3.11", "2.5.1").platform_module.repair_tool == "auditwheel"


def test_only_win_64_plans_carry_windows_facts() -> None:
    win = torch_plan("win-64", "12.4", "3.11", "2.5.1").windows
    assert win is not None and "cudart64_12.dll" in win.redistributable_dlls and win.embeddable is not None
    assert torch_plan("linux-64", "12.4", "3.11", "2.5.1").windows is None


def test_no_stage_compares_platform_names() -> None:
    """The stages ask the Platform Protocol (plan.platform_module); the smoke resources run inside the target's
    Python and test sys.platform, which is no Plan platform."""
    found = [
        f"{path.relative_to(STAGES)}:{number}: {line.strip()}"
        for path in sorted(STAGES.rglob("*.py"))
        if "resources" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PLATFORM_NAME.search(line) and "sys.platform" not in line
    ]
    assert found == []
