"""What a platform module resolves for a cell (its toolchain, build environment, site-packages and ABI tag), behind
one Protocol; each OS implements it in its build module (platforms/windows/build.py, platforms/linux/build.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from torchbuild.config.compat import Compat, CudaRelease, KnownBadVisualStudio, TorchRelease
from torchbuild.config.options import BuildOptions


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """The compilers a cell needs. Windows fills the msvc_* fields, Linux the gcc_* fields."""

    compiler: str  # "msvc" | "gcc"
    generator: str  # CMAKE_GENERATOR
    nvcc: str | None = None  # CUDA version whose nvcc compiles the cell
    msvc_toolset: str | None = None  # e.g. "14.11" -> vcvarsall.bat x64 -vcvars_ver=14.11
    msvc_accepted: str | None = None  # the toolset range this nvcc accepts, e.g. "14.10-14.11"
    visual_studio: int | None = None  # year of the Visual Studio that ships msvc_toolset
    vcvarsall_args: tuple[str, ...] = ()
    gcc_accepted: str | None = None  # gcc majors nvcc accepts, e.g. "6-13"
    nvtx: str | None = None  # how the CUDA toolkit provides NVTX (toolchains.yaml `nvtx`), for the build's check
    # win-64: what the activation needs to explain a missing or refused toolset, without the tables
    visual_studio_toolsets: str | None = None  # the toolsets the Visual Studio of msvc_toolset ships, e.g. 14.30-14.44
    known_bad: tuple[KnownBadVisualStudio, ...] = ()  # Visual Studio updates known to break the build
    msvc_table: str = ""  # every CUDA version with the MSVC toolsets its nvcc accepts, one line


@dataclass(frozen=True, kw_only=True)
class Target:
    """What a platform module needs to know to resolve its part of a Plan."""

    compat: Compat
    release: TorchRelease
    cuda: CudaRelease | None
    python: str
    options: BuildOptions


class Platform(Protocol):
    name: str  # conda subdir: win-64, linux-64

    def toolchain(self, target: Target) -> Toolchain: ...

    def build_env(self, target: Target, toolchain: Toolchain) -> Mapping[str, str]: ...

    def site_packages(self, python: str) -> str: ...

    def python_abi_tag(self, python: str) -> str: ...


def cpython_abi_tag(python: str) -> str:
    """cp36m before Python 3.8 (pymalloc flag), cp38 after."""
    major, minor = (int(p) for p in python.split(".")[:2])
    return f"cp{major}{minor}m" if (major, minor) < (3, 8) else f"cp{major}{minor}"


def _max_jobs(options: BuildOptions) -> str:
    return str(os.cpu_count() or 1) if options.max_jobs == "auto" else options.max_jobs


def common_env(cuda: CudaRelease | None, version: str, build_number: int, options: BuildOptions) -> dict[str, str]:
    """The build variables every platform sets: version, build number, jobs, CUDA and cuDNN, the compiler cache."""
    env = {
        "PYTORCH_BUILD_VERSION": version,
        "PYTORCH_BUILD_NUMBER": str(build_number),
        "MAX_JOBS": _max_jobs(options),
        "USE_CUDA": "1" if cuda else "0",
    }
    if cuda is None:
        env["NO_CUDA"] = "1"  # the pre-1.0 spelling of USE_CUDA=0; later releases ignore it
    else:
        env["TORCH_CUDA_ARCH_LIST"] = cuda.arch_list
        env["USE_CUDNN"] = "1"
        env["TORCH_NVCC_FLAGS"] = "-Xfatbin -compress-all"
    if options.compiler_cache == "sccache":
        env["CMAKE_C_COMPILER_LAUNCHER"] = "sccache"
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = "sccache"
        if cuda is not None:
            env["CMAKE_CUDA_COMPILER_LAUNCHER"] = "sccache"
    return env
