"""The closure checks resolve a library against the files of the wheel's declared requirements (the Plan's
``declared_libraries``), and a library nobody provides fails naming the library, its importer and the requirement
that should have provided it. Real PE files (mingw-w64) and real ELF files (gcc) importing the real library names
of torch 2.3.1's MKL and torch 2.10.0's CUDA 12.8 libraries, against the real Plans of those cells."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.support_source_repair import build_so
from tests.pe_fixtures import DLLTOOL, GCC64, SOURCES
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import Plan, resolve
from torchbuild.platforms.closure import left_to_dependencies, with_hints
from torchbuild.platforms.linux import elf
from torchbuild.platforms.windows import pe

MATRIX = matrix.parse("build:\n  max_jobs: 8\n", "test-matrix.yaml")


def plan_of(platform: str, cuda: str, python: str, torch: str) -> Plan:
    return resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), MATRIX)


def importer(dest: Path, imported: str) -> Path:
    """torch_cpu.dll: a real AMD64 DLL whose import table names ``imported`` (an import library made by dlltool)."""
    if shutil.which(GCC64) is None or shutil.which(DLLTOOL) is None:
        pytest.skip("skipped: mingw-w64 is not installed (apt-get install mingw-w64)")
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([DLLTOOL, "--input-def", str(SOURCES / "missing.def"), "--dllname", imported,
                    "--output-lib", "libimported.a"], cwd=dest, check=True, capture_output=True)  # fmt: skip
    source = dest / "torch_cpu.c"
    source.write_text("extern int missing_value(void);\n__declspec(dllexport) int f(void) { return missing_value(); }")
    subprocess.run([GCC64, "-shared", "-o", "torch_cpu.dll", str(source), "-L.", "-limported"], cwd=dest,
                   check=True, capture_output=True)  # fmt: skip
    return dest / "torch_cpu.dll"


def test_pe_import_of_mkl_resolves_to_the_mkl_requirement(tmp_path: Path) -> None:
    plan = plan_of("win-64", "cpu", "3.12", "2.3.1")
    dll = importer(tmp_path / "build", "mkl_intel_thread.1.dll")
    root = tmp_path / "wheel"
    (root / "torch/lib").mkdir(parents=True)
    shutil.copyfile(dll, root / "torch/lib/torch_cpu.dll")
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    report = pe.check_tree(root, python="3.12", provided=provided)
    assert report.ok, report.summary()
    [hit] = [r for r in report.resolved if r.needed == "mkl_intel_thread.1.dll"]
    assert hit.via == "dependency"
    assert hit.target.startswith("installed by mkl==2021.4.0 (mkl-2021.4.0-py2.py3-none-win_amd64.whl")
    # Without the Plan's requirements the same wheel is broken
    assert not pe.check_tree(root, python="3.12").ok


def test_pe_import_nobody_provides_names_the_requirement_that_should_have(tmp_path: Path) -> None:
    plan = plan_of("win-64", "cpu", "3.12", "2.3.1")
    dll = importer(tmp_path / "build", "mkl_intel_thread.2.dll")  # MKL 2024's name; the pin is 2021.4.0
    root = tmp_path / "wheel"
    (root / "torch/lib").mkdir(parents=True)
    shutil.copyfile(dll, root / "torch/lib/torch_cpu.dll")
    report = pe.check_tree(root, python="3.12", provided=cuda_wheels.provided_libraries(plan.declared_libraries))
    report = with_hints(report, lambda name: cuda_wheels.should_have_provided(name, plan.declared_libraries))
    [failed] = [c for c in report.checks() if c.code == "P101"]
    assert failed.file == "torch/lib/torch_cpu.dll"
    assert "torch/lib/torch_cpu.dll imports mkl_intel_thread.2.dll" in failed.message
    assert "the declared requirement mkl==2021.4.0 (mkl-2021.4.0-py2.py3-none-win_amd64.whl) should have" in (
        failed.message
    )


def test_elf_needs_resolve_through_the_rpath_into_the_nvidia_wheels(tmp_path: Path) -> None:
    plan = plan_of("linux-64", "12.8", "3.11", "2.10.0")
    stubs = tmp_path / "stubs"
    cudart = build_so(stubs / "libcudart.so.12", soname="libcudart.so.12")
    cublas = build_so(stubs / "libcublas.so.13", soname="libcublas.so.13")  # CUDA 13's name: nobody provides it
    root = tmp_path / "wheel"
    rpath = ["$ORIGIN/../../nvidia/cuda_runtime/lib", "$ORIGIN/../../nvidia/cublas/lib", "$ORIGIN"]
    build_so(root / "torch/lib/libtorch_cuda.so", soname="libtorch_cuda.so", needs=[cudart], runpath=rpath)
    build_so(root / "torch/lib/libtorch_cublas.so", soname="libtorch_cublas.so", needs=[cublas], runpath=rpath)
    beside = cuda_wheels.site_packages_libraries(plan.declared_libraries)
    report = elf.check_tree(root, "manylinux_2_28_x86_64", provided=beside)
    report = with_hints(report, lambda name: cuda_wheels.should_have_provided(name, plan.declared_libraries))
    [hit] = [r for r in report.resolved if r.needed == "libcudart.so.12"]
    assert hit.via == "dependency"
    assert hit.target == (
        "nvidia/cuda_runtime/lib/libcudart.so.12, installed by nvidia-cuda-runtime-cu12==12.8.90 "
        "(nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl)"
    )
    assert "1 from declared requirements" in report.summary()
    assert left_to_dependencies(report).startswith("libcudart.so.12 from nvidia-cuda-runtime-cu12==12.8.90 (")
    [missing] = report.missing
    assert (missing.file, missing.needed) == ("torch/lib/libtorch_cublas.so", "libcublas.so.13")
    assert "the declared requirement nvidia-cublas-cu12==12.8.4.1" in missing.message
    assert missing.message.endswith("not libcublas.so.13")


def test_elf_library_outside_the_rpath_is_not_taken_from_a_requirement(tmp_path: Path) -> None:
    """The requirement's file must be on the importer's search path, as ld.so looks for it."""
    plan = plan_of("linux-64", "12.8", "3.11", "2.10.0")
    cudart = build_so(tmp_path / "stubs/libcudart.so.12", soname="libcudart.so.12")
    root = tmp_path / "wheel"
    build_so(root / "torch/lib/libtorch_cuda.so", needs=[cudart], runpath=["$ORIGIN"])
    report = elf.check_tree(
        root, "manylinux_2_28_x86_64", provided=cuda_wheels.site_packages_libraries(plan.declared_libraries)
    )
    assert [m.needed for m in report.missing] == ["libcudart.so.12"]
