"""CUDA on the build host: which install (``CUDA_PATH_Vx_y`` on Windows, ``/usr/local/cuda-X.Y`` on Linux), its
nvcc's version, cuDNN's version and NVTX.

Only ``nvcc_version`` runs a program; the rest reads files and variables.
"""

from __future__ import annotations

import re
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchbuild.host import signals
from torchbuild.knowledge.compat import version_key
from torchbuild.platforms.toolchain import Requirement, ToolchainError

NVCC_FIX_WINDOWS = (
    "install CUDA {v} from https://developer.nvidia.com/cuda-toolkit-archive (its installer sets "
    "CUDA_PATH_V{u}), or set CUDA_PATH_V{u} to an existing CUDA {v} folder"
)
_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)+)")
_CUDA_PATH_VAR = re.compile(r"^CUDA_PATH_V(\d+)_(\d+)$", re.IGNORECASE)
_CUDNN_DEFINE = re.compile(r"^\s*#\s*define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class NvccVersion:
    release: str  # 12.4
    full: str  # 12.4.131


def parse_nvcc_version(text: str) -> NvccVersion:
    """From ``nvcc --version``: 'Cuda compilation tools, release 12.4, V12.4.131'."""
    match = _NVCC_RELEASE.search(text)
    if match is None:
        raise ToolchainError(f"cannot read nvcc's version from its output: {text.strip()[-200:]!r}")
    return NvccVersion(release=f"{match.group(1)}.{match.group(2)}", full=match.group(3))


def nvcc_version(nvcc: Path) -> NvccVersion:
    try:
        proc = signals.run([str(nvcc), "--version"], capture_output=True, text=True, errors="replace", timeout=60)
    except OSError as exc:
        raise ToolchainError(f"{nvcc} does not run: {exc}") from None
    return parse_nvcc_version(proc.stdout + proc.stderr)


def nvcc_name(windows: bool) -> str:
    return "nvcc.exe" if windows else "nvcc"


# --- Windows: CUDA_PATH_Vx_y ------------------------------------------------------------------------------


def cuda_path_vars(environ: Mapping[str, str]) -> dict[str, str]:
    """CUDA installs the Windows installers registered: {'12.4': 'C:\\...\\v12.4', ...}, oldest first."""
    found = {}
    for name, value in environ.items():
        match = _CUDA_PATH_VAR.match(name)
        if match and value:
            found[f"{int(match.group(1))}.{int(match.group(2))}"] = value
    return dict(sorted(found.items(), key=lambda kv: version_key(kv[0])))


def cuda_path_var(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"CUDA_PATH_V{major}_{minor}"


def choose_windows_cuda(environ: Mapping[str, str], version: str) -> Path:
    """Several CUDA installs side by side: the one for the Plan is ``%CUDA_PATH_Vx_y%`` (never plain CUDA_PATH,
    which points at whichever was installed last)."""
    installs = cuda_path_vars(environ)
    if version in installs:
        return Path(installs[version])
    var = cuda_path_var(version)
    have = ", ".join(f"{v} ({p})" for v, p in installs.items()) or "none"
    fix = NVCC_FIX_WINDOWS.format(v=version, u=var.removeprefix("CUDA_PATH_V"))
    raise ToolchainError(
        f"CUDA {version} is not installed: {var} is not set (CUDA installs found: {have}). Fix: {fix}."
    )


# --- cuDNN ------------------------------------------------------------------------------------------------


def parse_cudnn_header(text: str) -> tuple[int, int, int] | None:
    """CUDNN_MAJOR/MINOR/PATCHLEVEL from cudnn_version.h (cuDNN >= 8) or cudnn.h (older)."""
    values = {name: int(value) for name, value in _CUDNN_DEFINE.findall(text)}
    if "MAJOR" not in values:
        return None
    return values["MAJOR"], values.get("MINOR", 0), values.get("PATCHLEVEL", 0)


def cudnn_include_dirs(
    cuda_root: Path | None, environ: Mapping[str, str], windows: bool, cuda_version: str | None
) -> list[Path]:
    """Where PyTorch's FindCUDNN looks, in its order: CUDNN_INCLUDE_DIR, CUDNN_ROOT(_DIR)/CUDNN_PATH/CUDNN_HOME, the
    CUDA root, then the installers' default folders and the nvidia-cudnn-* wheels of the running Python."""
    dirs: list[Path] = []
    if environ.get("CUDNN_INCLUDE_DIR"):
        dirs.append(Path(environ["CUDNN_INCLUDE_DIR"]))
    for var in ("CUDNN_ROOT", "CUDNN_ROOT_DIR", "CUDNN_PATH", "CUDNN_HOME"):
        if environ.get(var):
            root = Path(environ[var])
            dirs += [root / "include", *(_versioned(root / "include", cuda_version))]
    if cuda_root is not None:
        dirs.append(cuda_root / "include")
    if windows:
        # cuDNN 9 installer: C:\Program Files\NVIDIA\CUDNN\v9.1\include\12.4\cudnn_version.h
        base = Path(environ.get("ProgramFiles", r"C:\Program Files")) / "NVIDIA" / "CUDNN"
        if base.is_dir():
            for release in sorted(base.iterdir(), key=lambda p: p.name, reverse=True):
                dirs += [*(_versioned(release / "include", cuda_version)), release / "include"]
    else:
        dirs += [Path("/usr/include"), Path("/usr/include/x86_64-linux-gnu"), Path("/usr/local/cudnn/include")]
    purelib = Path(sysconfig.get_paths()["purelib"])
    dirs += [purelib / "nvidia" / "cudnn" / "include", purelib / "nvidia" / "cu13" / "include"]
    return dirs


def _versioned(include: Path, cuda_version: str | None) -> list[Path]:
    return [include / cuda_version] if cuda_version else []


def find_cudnn(dirs: Sequence[Path], major: int | None, cuda_version: str = "") -> Requirement:
    name = f"cuDNN {major}" if major else "cuDNN"
    wheel = f"nvidia-cudnn-cu{cuda_version.split('.')[0]}" if cuda_version else "nvidia-cudnn-cu<CUDA major>"
    fix = (
        f"install cuDNN {major} for CUDA {cuda_version or 'this CUDA'} (https://developer.nvidia.com/cudnn-archive) "
        f"and set CUDNN_ROOT to its folder, or `pip install \"{wheel}=={major}.*\"` into the build Python"
    )
    seen = []
    for directory in dirs:
        for header in ("cudnn_version.h", "cudnn.h"):
            path = directory / header
            if not path.is_file():
                continue
            version = parse_cudnn_header(path.read_text(encoding="utf-8", errors="replace"))
            if version is None:
                continue
            text = ".".join(map(str, version))
            if major is not None and version[0] != major:
                seen.append(f"{text} at {path}")
                continue
            return Requirement(name, True, f"{text} ({path})")
    looked = ", ".join(str(d) for d in dirs[:6])
    detail = f"only other majors: {'; '.join(seen)}" if seen else f"no cudnn_version.h in {looked}, ..."
    return Requirement(name, False, detail, fix)


# --- NVTX -------------------------------------------------------------------------------------------------


def find_nvtx(cuda_root: Path | None, environ: Mapping[str, str], windows: bool, flavour: str) -> Requirement:
    """``nvtx3``: header-only NVTX3 in the CUDA root. ``nvtoolsext``: the compiled NvToolsExt library (on Windows the
    standalone install in NVTOOLSEXT_PATH; on Linux libnvToolsExt in the toolkit). PyTorch fails with "Cannot find
    nvToolsExt" without it."""
    if flavour == "nvtx3":
        header = cuda_root / "include" / "nvtx3" / "nvToolsExt.h" if cuda_root else None
        if header is not None and header.is_file():
            return Requirement("NVTX3 headers", True, str(header.parent))
        return Requirement(
            "NVTX3 headers",
            False,
            f"no include/nvtx3/nvToolsExt.h in {cuda_root or 'the CUDA root'}",
            "install the CUDA toolkit's NVTX component (Windows installer: 'Nsight NVTX'), or `pip install nvidia-nvtx`"
            " and copy its include/nvtx3 into the CUDA root",
        )
    if windows:
        root = Path(environ.get("NVTOOLSEXT_PATH") or r"C:\Program Files\NVIDIA Corporation\NvToolsExt")
        lib = root / "lib" / "x64" / "nvToolsExt64_1.lib"
        if lib.is_file():
            return Requirement("NvToolsExt", True, str(root))
        return Requirement(
            "NvToolsExt",
            False,
            f"no {lib}",
            "install NvToolsExt (the CUDA <= 11.x installers' 'Nsight NVTX' component, or PyTorch CI's NvToolsExt.7z) "
            "and set NVTOOLSEXT_PATH to its folder",
        )
    candidates = [cuda_root / d / "libnvToolsExt.so" for d in ("lib64", "lib")] if cuda_root else []
    for lib in candidates:
        if lib.is_file():
            return Requirement("NvToolsExt", True, str(lib))
    where = cuda_root or "the CUDA root"
    return Requirement("NvToolsExt", False, f"no libnvToolsExt.so in {where}", "install the toolkit's NVTX package")
