"""What every smoke check shares: what it is told to expect, what it reports, how it fails, and the environment its
process runs in. Standard library only (copied into the fresh environments with smoke_checks.py)."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

CHECK_TIMEOUT_S = 300.0
START_RETRY_S = 2.0  # a process that could not be started is tried once more after this pause
T = TypeVar("T")
# A file that exists once the first check process has ended (its import of torch wrote torch's bytecode); given to
# the processes that start beside it (smoke_checks.HASH_FIRST)
FIRST_DONE_ENV = "TORCHBUILD_SMOKE_FIRST_DONE"
TAIL_LINES = 40
# Runtime settings that would hide what a user without them sees: a second OpenMP runtime tolerated,
# libraries found through the host's paths instead of the package's own. And one that makes every process unlike a
# user's: no bytecode written, so that each import of torch compiles its modules again.
SCRUBBED_ENV = (
    "PYTHONDONTWRITEBYTECODE",
    "KMP_DUPLICATE_LIB_OK",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "DYLD_LIBRARY_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
)
# Lines that tell nothing about the check: Wine (win-64 artifacts run under Wine on Linux) logs one for every native
# DLL it loads (``warn:module:find_builtin_dll cannot find builtin library``), 30 and more for an import of torch.
NOISE = ("find_builtin_dll cannot find builtin",)


@dataclass(frozen=True)
class Expect:
    version: str  # torch.__version__, e.g. 2.13.0+cpu
    cuda: str  # "cpu" or X.Y (torch.version.cuda)
    cudnn: int | None  # cuDNN major for CUDA cells
    torch_file: str | None  # where torch/__init__.py must be imported from
    cudnn_version: str | None = None  # X.Y.Z of the cuDNN the wheel's declared requirement pins
    # file names of the libraries the wheel's declared requirements install: each one loaded must be the environment's
    from_environment: tuple[str, ...] = ()
    torchaudio: str | None = None  # the release of torchaudio installed beside torch (its checks run only then)
    torchvision: str | None = None  # the release of torchvision installed beside torch (its checks run only then)
    broken_scripts: tuple[str, ...] = ()  # console scripts the Plan records as upstream's faults (they may fail)
    # (name, version) of each package installed beside torch without checks of its own (checks_beside.py)
    companions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Outcome:
    status: str  # passed | failed | skipped
    message: str


class CheckFailed(Exception):
    """A check ran and found something wrong (as opposed to crashing)."""


def torch_module() -> Any:
    return importlib.import_module("torch")


def torch_folder() -> Path:
    """The installed torch package's folder, found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise CheckFailed("torch is not importable here")
    return Path(spec.origin).parent


def numpy_module() -> Any:
    return importlib.import_module("numpy")


def built_with(config: str) -> dict[str, bool]:
    """What ``torch.__config__.show()`` says the build has: MKL (BLAS_INFO=mkl / USE_MKL=ON / the MKL line),
    OpenMP (USE_OPENMP=ON / the OpenMP line), oneDNN (USE_MKLDNN=ON)."""
    return {
        "MKL": "USE_MKL=ON" in config or "BLAS_INFO=mkl" in config or "Math Kernel Library" in config,
        "OpenMP": "USE_OPENMP=ON" in config or "\n  - OpenMP" in config,
        "oneDNN": "USE_MKLDNN=ON" in config,
    }


def gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU, found without torch (so that a CPU build can tell 'no GPU')."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, errors="replace", timeout=60,
                                check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU " in listed.stdout


def tail(text: str, lines: int = TAIL_LINES) -> str:
    kept = [line for line in text.strip().splitlines() if not any(n in line for n in NOISE)]
    return "\n".join(kept[-lines:])


def clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for name in SCRUBBED_ENV:
        env.pop(name, None)
    env["PYTHONNOUSERSITE"] = "1"
    return env


def after_first_process() -> None:
    """Where this process started beside the first: wait until that one has ended before importing torch, so that
    torch's bytecode is compiled once, not by both at the same time."""
    marker = os.environ.get(FIRST_DONE_ENV)
    deadline = time.monotonic() + CHECK_TIMEOUT_S / 2
    while marker and not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.1)


def wine_version() -> str | None:
    """Wine's version when this Windows process runs under Wine (ntdll exports wine_get_version), else None."""
    if sys.platform != "win32":
        return None
    try:
        getter = ctypes.WinDLL("ntdll").wine_get_version  # type: ignore[attr-defined,unused-ignore]
    except (OSError, AttributeError):
        return None
    getter.restype = ctypes.c_char_p
    return str(getter().decode())


def host_description() -> str:
    wine = wine_version()
    return f"Windows under Wine {wine}" if wine else f"{platform.system()} {platform.machine()}"


def cxx_compiler() -> str | None:
    """The C++ compiler a build here would take: $CXX, else g++, c++ or clang++ on PATH."""
    for name in (os.environ.get("CXX", ""), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    return None


class NotStarted(Exception):
    """A process that could not be started, twice; the message gives both errors."""


def started_twice(start: Callable[[], T], said: Callable[[str], None] | None = None) -> tuple[T, str]:
    """``start()`` (it starts a process), tried once more after START_RETRY_S where it raises OSError: the OS could
    not start the process ("[WinError 1359] Internal error" under a loaded Wine, EAGAIN, EMFILE), a failure of the
    host, never of what the process would check. What it returned, and the first try's error ("" where it started at
    once); ``said`` hears of the retry before it is made. NotStarted after two failures. A program that is missing
    or may not be run (FileNotFoundError, PermissionError) is raised as it is: no retry mends it."""
    errors: list[str] = []
    while True:
        try:
            return start(), errors[0] if errors else ""
        except (FileNotFoundError, PermissionError):
            raise
        except OSError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            if len(errors) > 1:
                raise NotStarted("; then ".join(errors)) from None
            if said is not None:
                said(errors[0])
            time.sleep(START_RETRY_S)
