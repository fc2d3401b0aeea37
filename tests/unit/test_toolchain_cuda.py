"""CUDA discovery on recorded inputs: nvcc --version of several releases, CUDA_PATH_Vx_y variables, cuDNN headers,
NVTX layouts (real files under tmp_path)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from torchbuild.platforms import cuda
from torchbuild.platforms.toolchain import ToolchainError

DATA = Path(__file__).resolve().parent.parent / "data" / "toolchain"


@pytest.mark.parametrize(
    ("recording", "release", "full"),
    [
        ("nvcc-8.0-windows.txt", "8.0", "8.0.44"),
        ("nvcc-9.0-windows.txt", "9.0", "9.0.176"),
        ("nvcc-11.8-windows.txt", "11.8", "11.8.89"),
        ("nvcc-12.4-windows.txt", "12.4", "12.4.99"),
        ("nvcc-13.0-linux.txt", "13.0", "13.0.88"),
    ],
)
def test_nvcc_version(recording: str, release: str, full: str) -> None:
    version = cuda.parse_nvcc_version((DATA / recording).read_text(encoding="utf-8"))
    assert (version.release, version.full) == (release, full)


def test_nvcc_version_unreadable() -> None:
    with pytest.raises(ToolchainError, match="cannot read nvcc's version"):
        cuda.parse_nvcc_version("'nvcc' is not recognized as an internal or external command")


def test_cuda_path_vars_pick_the_plans_install_not_cuda_path() -> None:
    environ = json.loads((DATA / "cuda-env-windows.json").read_text(encoding="utf-8"))
    assert list(cuda.cuda_path_vars(environ)) == ["11.8", "12.4", "12.8"]
    assert str(cuda.choose_windows_cuda(environ, "12.4")).endswith("v12.4")  # CUDA_PATH itself says v12.8


def test_missing_cuda_version_names_what_is_installed_and_the_fix() -> None:
    environ = json.loads((DATA / "cuda-env-windows.json").read_text(encoding="utf-8"))
    with pytest.raises(ToolchainError) as err:
        cuda.choose_windows_cuda(environ, "12.6")
    message = str(err.value)
    assert "CUDA_PATH_V12_6 is not set" in message
    assert "11.8 (" in message and "12.8 (" in message
    assert "cuda-toolkit-archive" in message


def test_cudnn_header_versions() -> None:
    assert cuda.parse_cudnn_header((DATA / "cudnn_version-9.1.0.h").read_text()) == (9, 1, 0)
    assert cuda.parse_cudnn_header((DATA / "cudnn-7.6.5.h").read_text()) == (7, 6, 5)
    assert cuda.parse_cudnn_header("#define CUDNN_VERSION 8000\n") is None


def test_find_cudnn_prefers_the_plans_major(tmp_path: Path) -> None:
    old, new = tmp_path / "cuda" / "include", tmp_path / "cudnn9" / "include" / "12.4"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    shutil.copy(DATA / "cudnn-7.6.5.h", old / "cudnn.h")
    shutil.copy(DATA / "cudnn_version-9.1.0.h", new / "cudnn_version.h")
    dirs = cuda.cudnn_include_dirs(tmp_path / "cuda", {"CUDNN_ROOT": str(tmp_path / "cudnn9")}, False, "12.4")
    found = cuda.find_cudnn(dirs, 9)
    assert found.found and found.detail.startswith("9.1.0 (")
    wrong = cuda.find_cudnn([old], 9)
    assert not wrong.found and "only other majors: 7.6.5" in wrong.detail and "CUDNN_ROOT" in wrong.fix


def test_nvtx3_and_nvtoolsext(tmp_path: Path) -> None:
    root = tmp_path / "cuda"
    missing = cuda.find_nvtx(root, {}, windows=True, flavour="nvtx3")
    assert not missing.found and "nvtx3/nvToolsExt.h" in missing.detail and "nvidia-nvtx" in missing.fix
    (root / "include" / "nvtx3").mkdir(parents=True)
    (root / "include" / "nvtx3" / "nvToolsExt.h").write_text("/* NVTX3 */\n")
    assert cuda.find_nvtx(root, {}, windows=True, flavour="nvtx3").found
    ext = tmp_path / "NvToolsExt"
    absent = cuda.find_nvtx(root, {"NVTOOLSEXT_PATH": str(ext)}, windows=True, flavour="nvtoolsext")
    assert not absent.found and "NVTOOLSEXT_PATH" in absent.fix
    (ext / "lib" / "x64").mkdir(parents=True)
    (ext / "lib" / "x64" / "nvToolsExt64_1.lib").write_bytes(b"!<arch>\n")
    assert cuda.find_nvtx(root, {"NVTOOLSEXT_PATH": str(ext)}, windows=True, flavour="nvtoolsext").found
