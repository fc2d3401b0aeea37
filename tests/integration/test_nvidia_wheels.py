"""The per-CUDA-major DLL names of dll_providers.yaml against NVIDIA's real win_amd64 wheels on the package index:
for CUDA 11, 12 and 13 cells, every name the data says a cell's binaries may take from NVIDIA's redistributables is
in the wheel its provider would download (member lists read without downloading the wheels)."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

import pytest

from tests.remote_wheels import members, newest_wheel
from torchbuild.knowledge import dll_providers

pytestmark = pytest.mark.slow

# A cell per CUDA major with wheels on the index (NVIDIA's Windows wheels start at 11.7), and the newest 12.x.
CELLS = [("11.8", 9), ("12.4", 9), ("12.9", 9), ("13.0", 9)]
VC_RUNTIME = "msvc-runtime"  # its DLL names are checked against its wheel by the repair tests


@pytest.mark.parametrize(("cuda", "cudnn"), CELLS, ids=[c for c, _ in CELLS])
def test_the_data_names_what_nvidias_wheels_hold(cuda: str, cudnn: int) -> None:
    data = dll_providers.load()
    values = {"cuda": cuda, "cudnn": str(cudnn), "cuda_major": cuda.split(".")[0], "cuda_minor": cuda.split(".")[1]}
    listed: dict[str, list[str]] = {}  # requirement -> DLL names in its wheel
    checked, absent = [], []
    without_wheel = []
    for pattern in dll_providers.redistributable_dlls("win-64", "14.44", cuda, cudnn):
        provider = data.provider_for(pattern)
        assert provider is not None, pattern
        if provider.name == VC_RUNTIME:
            continue
        requirement = provider.requirement({**values, "cuda_nodot": values["cuda_major"] + values["cuda_minor"]})
        if requirement is None:
            without_wheel.append(f"{pattern} ({provider.name})")
            continue
        if requirement not in listed:
            _name, url = newest_wheel(requirement)
            listed[requirement] = [PurePosixPath(m).name for m in members(url) if m.lower().endswith(".dll")]
        if any(fnmatch.fnmatch(dll.lower(), pattern.lower()) for dll in listed[requirement]):
            checked.append(pattern)
        else:
            absent.append(f"{pattern}: not in {requirement}'s wheel ({', '.join(listed[requirement])})")
    assert not absent, absent
    assert len(checked) >= 10, checked
    # What no wheel provides is said in the data (NVTX 1 before CUDA 12, zlibwapi for cuDNN 8); nothing else.
    assert all(name.startswith(("nvToolsExt64_1.dll", "zlibwapi.dll")) for name in without_wheel), without_wheel
