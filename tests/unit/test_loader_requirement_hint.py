"""What the loader check (TB205/TB108) adds to a DLL that did not load: the requirement that installs it. On the
Windows CUDA fixture's Plans (tests/cuda_win_fixture.py: the win-64 CUDA 12.8 cell with PyPI's real nvidia-*
win_amd64 wheels as its declared requirements); the loads themselves run under Wine in
tests/integration/test_wincuda_fixture.py."""

from __future__ import annotations

import dataclasses

from tests.builders import torch_plan
from tests.cuda_win_fixture import VARIANTS, NvidiaWheel
from torchbuild.plan import Plan
from torchbuild.stages.verify.loader import installed_by

CU128 = VARIANTS["12.8"]
PLAN = torch_plan("win-64", "12.8", "3.11", CU128.torch)


def with_requirements(*wheels: NvidiaWheel) -> Plan:
    return dataclasses.replace(PLAN, declared_libraries=tuple(w.as_requirement() for w in CU128.wheels if w in wheels))


def test_a_dll_of_a_declared_requirements_family_names_that_requirement() -> None:
    plan = with_requirements(*CU128.wheels)
    assert installed_by(plan, "nvrtc64_130_0.dll (needed by torch/lib/caffe2_nvrtc.dll)") == (
        "nvrtc64_130_0.dll: the declared requirement nvidia-cuda-nvrtc-cu12==12.8.93 "
        "(nvidia_cuda_nvrtc_cu12-12.8.93-py3-none-win_amd64.whl) should have provided it: it installs "
        "nvrtc64_120_0.alt.dll, nvrtc64_120_0.dll, not nvrtc64_130_0.dll"
    )


def test_a_dll_no_declared_requirement_installs_names_the_cells_provider() -> None:
    plan = with_requirements(CU128.runtime)
    assert installed_by(plan, "nvrtc64_120_0.dll (needed by torch/lib/caffe2_nvrtc.dll)") == (
        "nvrtc64_120_0.dll is installed by nvidia-cuda-nvrtc-cu12==12.8.* (dll_providers.yaml), which is not among "
        "the requirements (nvidia-cuda-runtime-cu12==12.8.90)"
    )


def test_nothing_is_added_without_declared_requirements_or_for_a_missing_export() -> None:
    assert installed_by(PLAN, "nvrtc64_120_0.dll (needed by torch/lib/caffe2_nvrtc.dll)") == ""
    plan = with_requirements(*CU128.wheels)
    assert installed_by(plan, "old.dll.bar (imported by torch/lib/newer.dll)") == ""
