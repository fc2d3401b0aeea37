"""The Windows CUDA fixture wheel: a small torch-like win_amd64 wheel, NOT torch, built with mingw-w64, whose DLLs
import the real CUDA runtime and NVRTC DLL names of CUDA 12.8 or 13.0 and whose METADATA declares the nvidia-*
requirements that install those DLLs. No CUDA torch wheel for Windows is reachable here (PyPI has none, and
download.pytorch.org is not reachable), so this fixture stands in for one; the nvidia-* wheels are PyPI's real
win_amd64 wheels, pinned below by sha256 (read from the files pip downloaded).

- torch/lib/torch_cuda.dll imports cudaRuntimeGetVersion from cudart64_1X.dll;
- torch/lib/caffe2_nvrtc.dll imports nvrtcVersion from nvrtc64_1X0_0.dll (torch's own DLL of that name does);
- torch/__init__.py adds the DLL directories as upstream's Windows CUDA wheels do (site-packages/nvidia/**/bin,
  the way cuda-pathfinder finds the nvidia-* wheels' DLLs, pytorch/pytorch#194056), loads both DLLs with ctypes and
  answers the versions; neither call needs a GPU or a driver.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.pe_fixtures import DLLTOOL, GCC64, SOURCES, _implib, _run
from torchbuild.knowledge.cuda_wheels import RequirementWheel

MARKER = 'platform_system == "Windows"'


@dataclass(frozen=True)
class NvidiaWheel:
    """One of NVIDIA's real win_amd64 wheels on PyPI."""

    name: str
    version: str
    file: str
    sha256: str
    size: int
    dlls: tuple[str, ...]  # its .dll members

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}; {MARKER}"

    def as_requirement(self) -> RequirementWheel:
        """The Plan fact the pipeline reads: a declared requirement whose wheel provides DLLs."""
        return RequirementWheel(requirement=self.requirement, name=self.name, version=self.version, file=self.file,
                                sha256=self.sha256, size=self.size, libraries=self.dlls)  # fmt: skip


@dataclass(frozen=True)
class CudaVariant:
    cuda: str
    torch: str  # the release whose win-64 Plan the fixture is repaired under
    cudart: str
    nvrtc: str
    runtime: NvidiaWheel
    nvrtc_wheel: NvidiaWheel
    runtime_version: int  # what cudaRuntimeGetVersion answers
    nvrtc_version: tuple[int, int]

    @property
    def wheels(self) -> tuple[NvidiaWheel, NvidiaWheel]:
        return (self.runtime, self.nvrtc_wheel)

    @property
    def builtins(self) -> str:
        """The NVRTC builtins DLL that nvrtc64 loads by name (dll_providers.yaml `loaded_by_name`)."""
        major, minor = self.cuda.split(".")
        return f"nvrtc-builtins64_{major}{minor}.dll"


CU12_BIN = "nvidia/cuda_runtime/bin"
CU12_NVRTC_BIN = "nvidia/cuda_nvrtc/bin"
CU13_BIN = "nvidia/cu13/bin/x86_64"  # CUDA 13's wheels (no -cu13 suffix) share one folder

VARIANTS = {
    "12.8": CudaVariant(
        cuda="12.8", torch="2.9.1", cudart="cudart64_12.dll", nvrtc="nvrtc64_120_0.dll",
        runtime=NvidiaWheel(
            "nvidia-cuda-runtime-cu12", "12.8.90", "nvidia_cuda_runtime_cu12-12.8.90-py3-none-win_amd64.whl",
            "c0c6027f01505bfed6c3b21ec546f69c687689aad5f1a377554bc6ca4aa993a8", 944318,
            (f"{CU12_BIN}/cudart64_12.dll",),
        ),
        nvrtc_wheel=NvidiaWheel(
            "nvidia-cuda-nvrtc-cu12", "12.8.93", "nvidia_cuda_nvrtc_cu12-12.8.93-py3-none-win_amd64.whl",
            "7a4b6b2904850fe78e0bd179c4b655c404d4bb799ef03ddc60804247099ae909", 73586838,
            (f"{CU12_NVRTC_BIN}/nvrtc-builtins64_128.dll", f"{CU12_NVRTC_BIN}/nvrtc64_120_0.alt.dll",
             f"{CU12_NVRTC_BIN}/nvrtc64_120_0.dll"),
        ),
        runtime_version=12080, nvrtc_version=(12, 8),
    ),
    "13.0": CudaVariant(
        cuda="13.0", torch="2.10.0", cudart="cudart64_13.dll", nvrtc="nvrtc64_130_0.dll",
        runtime=NvidiaWheel(
            "nvidia-cuda-runtime", "13.0.96", "nvidia_cuda_runtime-13.0.96-py3-none-win_amd64.whl",
            "f79298c8a098cec150a597c8eba58ecdab96e3bdc4b9bc4f9983635031740492", 2927037,
            (f"{CU13_BIN}/cudart64_13.dll",),
        ),
        nvrtc_wheel=NvidiaWheel(
            "nvidia-cuda-nvrtc", "13.0.88", "nvidia_cuda_nvrtc-13.0.88-py3-none-win_amd64.whl",
            "6bcd4e7f8e205cbe644f5a98f2f799bef9556fefc89dd786e79a16312ce49872", 76807835,
            (f"{CU13_BIN}/nvrtc-builtins64_130.dll", f"{CU13_BIN}/nvrtc64_130_0.alt.dll",
             f"{CU13_BIN}/nvrtc64_130_0.dll"),
        ),
        runtime_version=13000, nvrtc_version=(13, 0),
    ),
}  # fmt: skip

INIT = '''"""The Windows CUDA fixture wheel of torchbuild's tests (tests/cuda_win_fixture.py): NOT torch."""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_SITE = os.path.dirname(_HERE)


def _nvidia_dll_dirs():
    """Where pip put the nvidia-* requirements' DLLs (nvidia/<lib>/bin, nvidia/cu13/bin/x86_64), found as upstream's
    Windows CUDA wheels find them (cuda-pathfinder)."""
    found = []
    for root, _dirs, files in os.walk(os.path.join(_SITE, "nvidia")):
        if any(f.lower().endswith(".dll") for f in files):
            found.append(root)
    return sorted(found)


_ADDED = [os.add_dll_directory(d) for d in [os.path.join(_HERE, "lib"), *_nvidia_dll_dirs()] if os.path.isdir(d)]
_cuda = ctypes.CDLL(os.path.join(_HERE, "lib", "torch_cuda.dll"))
_nvrtc = ctypes.CDLL(os.path.join(_HERE, "lib", "caffe2_nvrtc.dll"))


def cuda_runtime_version():
    version = ctypes.c_int(0)
    status = _cuda.torch_cuda_runtime_version(ctypes.byref(version))
    return status, version.value


def nvrtc_version():
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    status = _nvrtc.torch_nvrtc_version(ctypes.byref(major), ctypes.byref(minor))
    return status, major.value, minor.value


def loaded_from(name):
    """The file the process loaded the DLL ``name`` from."""
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.GetModuleHandleW.restype = ctypes.c_void_p
    handle = kernel32.GetModuleHandleW(name)
    if not handle:
        return None
    buffer = ctypes.create_unicode_buffer(1024)
    kernel32.GetModuleFileNameW(ctypes.c_void_p(handle), buffer, 1024)
    return buffer.value
'''

PROBE = """import torch
print("cudaRuntimeGetVersion", *torch.cuda_runtime_version())
print("nvrtcVersion", *torch.nvrtc_version())
for name in ({names}):
    print("loaded", name, "from", torch.loaded_from(name))
"""


def probe_script(variant: CudaVariant) -> str:
    """What python.exe runs under Wine: import the fixture, call into both DLLs, say where the CUDA DLLs came from."""
    return PROBE.format(names=f"{variant.cudart!r}, {variant.nvrtc!r}")


def build_dlls(variant: CudaVariant, dest: Path) -> dict[str, bytes]:
    """torch/lib/torch_cuda.dll and torch/lib/caffe2_nvrtc.dll of ``variant``; skips the test without mingw-w64."""
    missing = [tool for tool in (GCC64, DLLTOOL) if shutil.which(tool) is None]
    if missing:
        tools = ", ".join(missing)
        pytest.skip(f"skipped: mingw-w64 is not installed ({tools} not on PATH; apt-get install mingw-w64)")
    dest.mkdir(parents=True, exist_ok=True)
    _implib(SOURCES / "cudart_version.def", variant.cudart, "libcudart.a", dest)
    _implib(SOURCES / "nvrtc.def", variant.nvrtc, "libnvrtc.a", dest)
    _run([GCC64, "-shared", "-s", "-o", "torch_cuda.dll", str(SOURCES / "torch_cuda.c"), "-L.", "-lcudart"], dest)
    _run([GCC64, "-shared", "-s", "-o", "caffe2_nvrtc.dll", str(SOURCES / "caffe2_nvrtc.c"), "-L.", "-lnvrtc"], dest)
    return {f"torch/lib/{n}": (dest / n).read_bytes() for n in ("torch_cuda.dll", "caffe2_nvrtc.dll")}


def build_wheel(
    variant: CudaVariant, dest: Path, filename: str, declare: tuple[NvidiaWheel, ...] | None = None
) -> Path:
    """The fixture wheel ``filename`` in ``dest``, declaring ``declare`` (default: both nvidia-* wheels)."""
    files = {"torch/__init__.py": INIT.encode(), **build_dlls(variant, dest / "build")}
    requires = [w.requirement for w in (variant.wheels if declare is None else declare)]
    return make_wheel(dest, filename, files, requires=requires)
