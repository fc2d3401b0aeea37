"""gcc and nvcc on Linux: nvcc of the Plan's CUDA (``/usr/local/cuda-X.Y``, CUDA_HOME, PATH or a provisioned root)
and a gcc whose major nvcc accepts (the ``__GNUC__`` guard in host_config.h).

``gcc_version`` and ``nvcc_version`` (in cuda.py) run programs; the choices are pure functions.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchbuild.host import signals
from torchbuild.knowledge.compat import Range
from torchbuild.platforms.cuda import NvccVersion
from torchbuild.platforms.toolchain import Requirement, ToolchainError


@dataclass(frozen=True)
class FoundNvcc:
    root: Path  # the toolkit root: bin/nvcc, include/, lib64/ or lib/
    version: NvccVersion
    how: str  # "/usr/local/cuda-12.4", "CUDA_HOME", "PATH", "provisioned"


def parse_gcc_version(text: str) -> tuple[int, ...]:
    """From ``gcc -dumpfullversion -dumpversion``: '12.2.0' (gcc >= 7) or '6' (older gcc prints only the major)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    try:
        return tuple(int(p) for p in first.split("."))
    except ValueError:
        raise ToolchainError(f"cannot read gcc's version from {first!r}") from None


def gcc_version(gcc: str) -> tuple[int, ...]:
    proc = signals.run([gcc, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, errors="replace",
                       check=False)  # fmt: skip
    return parse_gcc_version(proc.stdout)


def accepted_range(text: str) -> Range:
    """The Plan's gcc_accepted ('6-13', or '7' when min == max)."""
    low, _, high = text.partition("-")
    return Range(min=low, max=high or low)


def check_gcc(gcc: str | None, version: tuple[int, ...] | None, accepted: str | None, nvcc: str | None) -> Requirement:
    if gcc is None or version is None:
        return Requirement("gcc", False, "no gcc on PATH (or $CC)", "install gcc/g++ (e.g. apt-get install g++)")
    text = ".".join(map(str, version))
    if accepted is None:
        return Requirement("gcc", True, f"{text} ({gcc})")
    allowed = accepted_range(accepted)
    name = f"gcc {accepted} (nvcc {nvcc})"
    if str(version[0]) in allowed:
        return Requirement(name, True, f"{text} ({gcc})")
    return Requirement(
        name,
        False,
        f"{gcc} is gcc {text}; nvcc from CUDA {nvcc} accepts gcc majors {allowed} (host_config.h refuses others)",
        f"install gcc-{allowed.max} and g++-{allowed.max} and set CC/CXX (and CUDAHOSTCXX) to them",
    )


def find_gcc(environ: Mapping[str, str]) -> str | None:
    return environ.get("CC") or shutil.which("gcc", path=environ.get("PATH"))


def nvcc_candidates(version: str, environ: Mapping[str, str], provisioned: Path | None) -> list[tuple[Path, str]]:
    """Toolkit roots that may hold nvcc for ``version``, most specific first."""
    found: list[tuple[Path, str]] = [(Path(f"/usr/local/cuda-{version}"), f"/usr/local/cuda-{version}")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            found.append((Path(environ[var]), var))
    on_path = shutil.which("nvcc", path=environ.get("PATH"))
    if on_path:
        found.append((Path(os.path.realpath(on_path)).parent.parent, "PATH"))
    found.append((Path("/usr/local/cuda"), "/usr/local/cuda"))
    if provisioned is not None:
        found.append((provisioned, "provisioned from the package index"))
    return found


def choose_nvcc(
    version: str,
    candidates: Sequence[tuple[Path, str]],
    read_version: Callable[[Path], NvccVersion],
) -> tuple[FoundNvcc | None, list[str]]:
    """The first candidate whose ``bin/nvcc`` reports ``version``; and what the others were, for the message."""
    seen: list[str] = []
    for root, how in candidates:
        nvcc = root / "bin" / "nvcc"
        if not nvcc.is_file():
            continue
        if not (root / "include" / "cuda_runtime.h").is_file():
            seen.append(f"{nvcc} has no include/cuda_runtime.h beside it (a wrapper, not a toolkit root)")
            continue
        found = read_version(nvcc)
        if found.release == version:
            return FoundNvcc(root=root, version=found, how=how), seen
        seen.append(f"{nvcc} is CUDA {found.full}")
    return None, seen
