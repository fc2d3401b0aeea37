"""One OpenMP runtime per process: the closure check names each runtime the libraries of a package import, and
fails where there are two (pytorch/pytorch#193784: torch_cpu.dll importing vcomp140.dll and libomp140.x86_64.dll).
The PE cases are real DLLs built with mingw-w64 whose import tables name the runtimes; the ELF cases are the
loader's view of real names (auditwheel's hashed libgomp)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from torchbuild.platforms.closure import OpenMpRuntime, joint_openmp, openmp_family
from torchbuild.platforms.linux import elf
from torchbuild.platforms.linux.elf import ElfInfo
from torchbuild.platforms.windows import pe

GCC = "x86_64-w64-mingw32-gcc"
DLLTOOL = "x86_64-w64-mingw32-dlltool"
RUNTIMES = {"vcomp140.dll": "omp_get_max_threads", "libomp140.x86_64.dll": "__kmpc_fork_call",
            "libiomp5md.dll": "omp_get_num_threads"}  # fmt: skip
# what the fixtures may import besides the runtimes (a declared requirement's library: MKL's threading layer)
IMPORTABLE = {**RUNTIMES, "mkl_intel_thread.2.dll": "mkl_set_num_threads", "mkl_core.2.dll": "mkl_serv_malloc"}


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def dll_importing(folder: Path, name: str, runtimes: list[str]) -> Path:
    """A real AMD64 DLL ``name`` whose import table names each of ``runtimes`` (one function of each; any DLL of
    IMPORTABLE)."""
    if shutil.which(GCC) is None or shutil.which(DLLTOOL) is None:
        pytest.skip(f"skipped: mingw-w64 is not installed ({GCC}; apt-get install mingw-w64)")
    folder.mkdir(parents=True, exist_ok=True)
    calls, libs = [], []
    for index, runtime in enumerate(runtimes):
        symbol = IMPORTABLE[runtime]
        (folder / f"r{index}.def").write_text(f"LIBRARY \"{runtime}\"\nEXPORTS\n  {symbol}\n")
        _run([DLLTOOL, "--input-def", f"r{index}.def", "--dllname", runtime, "--output-lib", f"libr{index}.a"], folder)
        calls.append(f"extern int {symbol}(void);")
        libs.append(f"-lr{index}")
    body = " + ".join(f"{IMPORTABLE[r]}()" for r in runtimes) or "0"
    source = folder / f"{name}.c"
    source.write_text("\n".join(calls) + f"\n__declspec(dllexport) int work(void) {{ return {body}; }}\n")
    _run([GCC, "-shared", "-o", name, source.name, "-L.", *libs], folder)
    for leftover in [*folder.glob("*.def"), *folder.glob("*.a"), source]:
        leftover.unlink()
    return folder / name


def runtime_dll(folder: Path, runtime: str) -> None:
    """A DLL named as the runtime, exporting its function, so that the import resolves inside the package."""
    source = folder / "runtime.c"
    source.write_text(f"__declspec(dllexport) int {RUNTIMES[runtime]}(void) {{ return 1; }}\n")
    _run([GCC, "-shared", "-o", runtime, source.name], folder)
    source.unlink()


def test_the_193784_build_fails_naming_both_runtimes_and_who_imports_them(tmp_path: Path) -> None:
    lib = tmp_path / "torch" / "lib"
    dll_importing(lib, "torch_cpu.dll", ["vcomp140.dll", "libomp140.x86_64.dll"])
    for runtime in ("vcomp140.dll", "libomp140.x86_64.dll"):
        runtime_dll(lib, runtime)
    report = pe.check_tree(tmp_path, python="3.12")
    check = next(c for c in report.checks() if c.code == "P103")
    assert check.status == "failed"
    assert check.message.startswith(
        "2 OpenMP runtimes in one process: libomp140.x86_64.dll (LLVM's OpenMP) imported by torch/lib/torch_cpu.dll; "
        "vcomp140.dll (MSVC's vcomp) imported by torch/lib/torch_cpu.dll: "
    )
    assert report.ok, "every import resolves: what fails is the second runtime, not the closure"


def test_two_libraries_each_with_their_own_runtime_fail_too(tmp_path: Path) -> None:
    lib = tmp_path / "torch" / "lib"
    dll_importing(lib, "torch_cpu.dll", ["libiomp5md.dll"])
    dll_importing(lib, "fbgemm.dll", ["vcomp140.dll"])
    for runtime in ("libiomp5md.dll", "vcomp140.dll"):
        runtime_dll(lib, runtime)
    check = pe.check_tree(tmp_path, python="3.12").openmp_check()
    assert check.status == "failed"
    assert "libiomp5md.dll (Intel's OpenMP) imported by torch/lib/torch_cpu.dll" in check.message
    assert "vcomp140.dll (MSVC's vcomp) imported by torch/lib/fbgemm.dll" in check.message


def test_one_runtime_passes_naming_it_and_an_executables_own_runtime_does_not_count(tmp_path: Path) -> None:
    lib = tmp_path / "torch" / "lib"
    dll_importing(lib, "torch_cpu.dll", ["libiomp5md.dll"])
    dll_importing(lib, "fbgemm.dll", ["libiomp5md.dll"])
    runtime_dll(lib, "libiomp5md.dll")
    tool = dll_importing(tmp_path / "torch" / "bin", "tool.dll", ["vcomp140.dll"])
    tool.rename(tool.with_name("tool.exe"))  # a process of its own
    runtime_dll(tmp_path / "torch" / "bin", "vcomp140.dll")
    report = pe.check_tree(tmp_path, python="3.12")
    check = report.openmp_check()
    assert (check.status, check.message) == (
        "passed",
        "OpenMP: libiomp5md.dll (Intel's OpenMP, imported by torch/lib/fbgemm.dll, torch/lib/torch_cpu.dll)",
    )
    assert "; OpenMP: libiomp5md.dll (Intel's OpenMP" in report.summary()


def test_a_runtime_no_file_provides_still_counts(tmp_path: Path) -> None:
    # torch 2.3.0's win_amd64 wheel: torch_cpu.dll and fbgemm.dll import vcomp140.dll, which the wheel does not
    # carry; the process loads it from the machine all the same
    lib = tmp_path / "torch" / "lib"
    dll_importing(lib, "torch_cpu.dll", ["vcomp140.dll"])
    report = pe.check_tree(tmp_path, python="3.12")
    assert not report.ok and report.missing_names == ("vcomp140.dll",)
    assert report.openmp_runtimes()[0].where == ("not found",)
    assert report.openmp_check().message == "OpenMP: vcomp140.dll (MSVC's vcomp, imported by torch/lib/torch_cpu.dll)"
    dll_importing(lib, "fbgemm.dll", ["libiomp5md.dll"])
    runtime_dll(lib, "libiomp5md.dll")
    check = pe.check_tree(tmp_path, python="3.12").openmp_check()
    assert check.status == "failed"
    assert "vcomp140.dll (MSVC's vcomp) imported by torch/lib/torch_cpu.dll" in check.message
    assert "libiomp5md.dll (Intel's OpenMP) imported by torch/lib/fbgemm.dll" in check.message


def test_a_runtime_left_to_a_run_dependency_counts_as_one(tmp_path: Path) -> None:
    lib = tmp_path / "torch" / "lib"
    info = pe.read_pe(dll_importing(lib, "torch_cpu.dll", ["libiomp5md.dll"]).read_bytes(), "torch/lib/torch_cpu.dll")
    report = pe.resolve([info], ["torch/lib/torch_cpu.dll"], python="3.12", provided={"libiomp5md.dll": "intel-openmp"})
    assert report.openmp_check().status == "passed"
    assert report.openmp_runtimes()[0].where == ("installed by intel-openmp",)


def _package(root: Path, dlls: dict[str, list[str]]) -> pe.ClosureReport:
    """One package's closure: each DLL (a path below ``root``) importing the runtimes, left to the machine."""
    for path, runtimes in dlls.items():
        dll_importing(root / Path(path).parent, Path(path).name, runtimes)
    return pe.check_tree(root, python="3.11")


def test_torch_and_a_companion_each_with_one_runtime_fail_together_naming_both(tmp_path: Path) -> None:
    # torch 2.5.1 + torchaudio 2.5.1 (win_amd64, as PyPI ships them): torch_cpu.dll and fbgemm.dll import
    # libiomp5md.dll, torchaudio's libtorchaudio.pyd vcomp140.dll; each package alone has one runtime
    torch = _package(tmp_path / "torch", {"torch/lib/torch_cpu.dll": ["libiomp5md.dll"],
                                          "torch/lib/fbgemm.dll": ["libiomp5md.dll"]})  # fmt: skip
    audio = _package(tmp_path / "audio", {"torchaudio/lib/libtorchaudio.pyd": ["vcomp140.dll"]})
    assert torch.openmp_check().status == audio.openmp_check().status == "passed"
    problem, line = joint_openmp({"torch": torch.openmp_runtimes(), "torchaudio": audio.openmp_runtimes()})
    assert line == ""
    assert problem.startswith(
        "import torch, torchaudio loads 2 OpenMP runtimes into one process: libiomp5md.dll (Intel's OpenMP) imported "
        "by torch (torch/lib/fbgemm.dll, torch/lib/torch_cpu.dll) | vcomp140.dll (MSVC's vcomp) imported by "
        "torchaudio (torchaudio/lib/libtorchaudio.pyd): each keeps its own thread pool"
    )


def test_one_runtime_name_across_packages_is_one_runtime_and_a_hashed_copy_is_another(tmp_path: Path) -> None:
    torch = _package(tmp_path / "torch", {"torch/lib/torch_cpu.dll": ["vcomp140.dll"]})
    audio = _package(tmp_path / "audio", {"torchaudio/lib/libtorchaudio.pyd": ["vcomp140.dll"]})
    vision = _package(tmp_path / "vision", {"torchvision/_C.pyd": []})
    runtimes = {"torch": torch.openmp_runtimes(), "torchaudio": audio.openmp_runtimes(),
                "torchvision": vision.openmp_runtimes()}  # fmt: skip
    assert joint_openmp(runtimes) == (
        "",
        "import torch, torchaudio, torchvision: vcomp140.dll (MSVC's vcomp) imported by torch "
        "(torch/lib/torch_cpu.dll); torchaudio (torchaudio/lib/libtorchaudio.pyd) in the process",
    )
    hashed = OpenMpRuntime("vcomp140-1a2b3c4d.dll", "MSVC's vcomp", ("torchaudio.libs/x.pyd",), ("torchaudio.libs",))
    problem, _line = joint_openmp({"torch": torch.openmp_runtimes(), "torchaudio": (hashed,)})
    assert "2 OpenMP runtimes" in problem and "vcomp140-1a2b3c4d.dll (MSVC's vcomp) imported by torchaudio" in problem


def _elf(path: str, needed: tuple[str, ...]) -> ElfInfo:
    return ElfInfo(path=path, machine="EM_X86_64", soname=None, needed=needed, rpath=(), runpath=("$ORIGIN",))


def test_elf_libraries_with_gnu_and_intel_openmp_fail() -> None:
    libs = ["torch/lib/libtorch_cpu.so", "torch/lib/libgomp-a34b3233.so.1", "torch/lib/libiomp5.so",
            "torch/lib/libextra.so"]  # fmt: skip
    elves = [_elf(libs[0], ("libgomp-a34b3233.so.1",)), _elf(libs[3], ("libiomp5.so",))]
    report = elf.resolve(elves, libs, policy="manylinux_2_28_x86_64", system=frozenset())
    check = next(c for c in report.checks() if c.code == "E103")
    assert check.status == "failed"
    assert "libgomp-a34b3233.so.1 (GNU's OpenMP) imported by torch/lib/libtorch_cpu.so" in check.message
    assert "libiomp5.so (Intel's OpenMP) imported by torch/lib/libextra.so" in check.message


@pytest.mark.parametrize(
    ("name", "family"),
    [("VCOMP140.DLL", "MSVC's vcomp"), ("vcomp140d.dll", "MSVC's vcomp"), ("libiomp5md.dll", "Intel's OpenMP"),
     ("libiomp5.so", "Intel's OpenMP"), ("libomp140.x86_64.dll", "LLVM's OpenMP"), ("libomp.so.5", "LLVM's OpenMP"),
     ("libgomp.so.1", "GNU's OpenMP"), ("libgomp-1.dll", "GNU's OpenMP"), ("libgomp-a34b3233.so.1", "GNU's OpenMP"),
     ("libiompstubs5md.dll", None), ("libompitt.so", None), ("vcruntime140.dll", None)],
)  # fmt: skip
def test_runtime_names(name: str, family: str | None) -> None:
    assert openmp_family(name) == family
