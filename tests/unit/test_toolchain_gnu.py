"""Linux: gcc against the range nvcc accepts, and choosing nvcc of the Plan's CUDA among several roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchbuild.platforms.cuda import NvccVersion
from torchbuild.platforms.linux import gcc as gnu
from torchbuild.platforms.toolchain import ToolchainError


def test_gcc_version_forms() -> None:
    assert gnu.parse_gcc_version("12.2.0\n") == (12, 2, 0)
    assert gnu.parse_gcc_version("6\n") == (6,)
    with pytest.raises(ToolchainError):
        gnu.parse_gcc_version("gcc: command not found")


def test_gcc_in_and_out_of_range() -> None:
    ok = gnu.check_gcc("/usr/bin/gcc", (12, 2, 0), "6-13", "12.4")
    assert ok.found and ok.name == "gcc 6-13 (nvcc 12.4)"
    too_new = gnu.check_gcc("/usr/bin/gcc", (14, 1, 0), "6-11", "11.8")
    assert not too_new.found
    assert "accepts gcc majors 6-11" in too_new.detail and "gcc-11" in too_new.fix
    absent = gnu.check_gcc(None, None, "6-13", "12.4")
    assert not absent.found and "g++" in absent.fix


def _root(base: Path, name: str) -> Path:
    root = base / name
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "include" / "cuda_runtime.h").write_text("\n")
    return root


def test_choose_nvcc_of_the_plans_version(tmp_path: Path) -> None:
    a, b = _root(tmp_path, "cuda-12.4"), _root(tmp_path, "cuda-13.0")
    versions = {a / "bin" / "nvcc": NvccVersion("12.4", "12.4.131"), b / "bin" / "nvcc": NvccVersion("13.0", "13.0.88")}
    wrapper = tmp_path / "usr-local"
    (wrapper / "bin").mkdir(parents=True)
    (wrapper / "bin" / "nvcc").write_text("#!/bin/sh\nexec /usr/local/cuda-13.0/bin/nvcc \"$@\"\n")
    found, others = gnu.choose_nvcc("13.0", [(wrapper, "PATH"), (a, "CUDA_HOME"), (b, "x")], versions.__getitem__)
    assert found is not None and found.root == b and found.version.full == "13.0.88"
    assert any("wrapper" in o for o in others) and any("is CUDA 12.4.131" in o for o in others)
    none, seen = gnu.choose_nvcc("12.8", [(a, "CUDA_HOME")], versions.__getitem__)
    assert none is None and seen == [f"{a}/bin/nvcc is CUDA 12.4.131"]
