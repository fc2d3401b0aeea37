"""What a platform module resolves and decides for a cell, behind one Protocol: its toolchain, build environment,
site-packages and ABI tag for the build; its repairer, the reader of its libraries' imports (the closure check),
its conda layout and the backend that runs its smoke tests on a host. Each OS implements it in its build module
(platforms/windows/build.py, platforms/linux/build.py); the stages look it up by name (platforms/by_name.py) and
never compare platform names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from torchbuild.config.options import BuildOptions
from torchbuild.knowledge.compat import Compat, CudaRelease, KnownBadVisualStudio, TorchRelease


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


RepairTool = Literal["auditwheel", "delvewheel"]
SmokeBackend = Literal["venv", "wine"]  # a virtual environment on the host, or python.org's embeddable CPython in Wine


class LibraryUnreadable(ValueError):
    """A library whose imports its format's reader cannot read; the message is the reader's."""


class Platform(Protocol):
    name: str  # conda subdir: win-64, linux-64
    repair_tool: RepairTool  # what the repair stage runs: auditwheel (ELF) or delvewheel (PE)
    conda_windows_layout: bool  # a conda package of it installs as on Windows (Scripts\, Library\bin)

    def toolchain(self, target: Target) -> Toolchain: ...

    def build_env(self, target: Target, toolchain: Toolchain) -> Mapping[str, str]: ...

    def site_packages(self, python: str) -> str: ...

    def python_abi_tag(self, python: str) -> str: ...

    def compiles_on(self, host: str) -> bool:
        """Whether a cell of this platform compiles on ``host`` (a conda subdir)."""
        ...

    def expand_env(self, value: str, env: Mapping[str, str]) -> str:
        """A build variable's value as the build's shell reads it (cmd.exe expands %VAR%)."""
        ...

    def library_imports(self, path: Path, member: str) -> tuple[str, ...]:
        """The libraries ``path`` (``member`` in its wheel) imports; LibraryUnreadable where it cannot be read."""
        ...

    def smoke_backend(self, host: str) -> SmokeBackend | None:
        """How the smoke stages run this platform's artifacts on ``host``; None where they cannot."""
        ...


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
