"""The OpenMP count follows the libraries of a package's declared requirements: torch 2.3.x's torch_cpu.dll imports
vcomp140.dll and MKL's threading layer (from the `mkl` requirement), which brings Intel's libiomp5md.dll: two
runtimes in one process, each named with the chain that brings it. Upstream's own wheel of a release the data records
with exactly that set passes, saying so; a compiled wheel, another wheel or another set fails.

The PE cases are real DLLs built with mingw-w64 (tests/unit/test_openmp.py ``dll_importing``): a fixture
"torch_cpu.dll" and a fixture "mkl_intel_thread.2.dll" standing in for the requirement's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.conftest import ROOT
from tests.unit.test_openmp import dll_importing, runtime_dll
from torchbuild.config.matrix import Cell, load
from torchbuild.errors import UserError
from torchbuild.knowledge import companions, datafiles
from torchbuild.plan import resolve
from torchbuild.platforms.closure import (
    ClosureReport,
    RequirementLibrary,
    UpstreamOpenMp,
    joint_openmp,
    with_requirement_libraries,
)
from torchbuild.platforms.linux import elf
from torchbuild.platforms.linux.elf import ElfInfo
from torchbuild.platforms.windows import pe
from torchbuild.stages import requirement_libraries
from torchbuild.wheel.provenance import SourceInfo

MKL = "mkl==2021.4.0"
CHAIN = (
    "libiomp5md.dll (Intel's OpenMP) imported by mkl_intel_thread.2.dll of mkl==2021.4.0, which "
    "torch/lib/torch_cpu.dll imports"
)
UPSTREAM_2_3_1 = "e5fdccbf6f1334b2203a61a0e03821d5845f1421defe311dabeae2fc8fbeac2d"  # PyPI's cp312 win_amd64 wheel


@pytest.fixture(scope="module")
def torch_and_mkl(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClosureReport[pe.PeInfo], RequirementLibrary]:
    """The package (torch/lib/torch_cpu.dll importing vcomp140.dll and mkl_intel_thread.2.dll, which the declared
    requirement installs) and the requirement's library (importing libiomp5md.dll), read from the real DLLs."""
    root = tmp_path_factory.mktemp("package")
    dll_importing(root / "torch" / "lib", "torch_cpu.dll", ["vcomp140.dll", "mkl_intel_thread.2.dll"])
    runtime_dll(root / "torch" / "lib", "vcomp140.dll")  # vendored, as the repair does
    mkl = dll_importing(tmp_path_factory.mktemp("mkl") / "Library" / "bin", "mkl_intel_thread.2.dll",
                        ["libiomp5md.dll"])  # fmt: skip
    report = pe.check_tree(root, python="3.12", provided={"mkl_intel_thread.2.dll": MKL})
    info = pe.read_pe(mkl.read_bytes(), "Library/bin/mkl_intel_thread.2.dll")
    return report, RequirementLibrary(name="mkl_intel_thread.2.dll", provider=MKL, imports=info.imports)


def _openmp(report: ClosureReport[pe.PeInfo]) -> tuple[str, str]:
    check = report.openmp_check()
    return check.status, check.message


def test_without_the_requirements_libraries_only_one_runtime_is_seen(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    report, _mkl = torch_and_mkl
    assert report.ok, report.summary()
    assert _openmp(report) == (
        "passed", "OpenMP: vcomp140.dll (MSVC's vcomp, imported by torch/lib/torch_cpu.dll)"
    )  # fmt: skip


def test_the_requirements_runtime_is_counted_and_both_are_named_with_their_chain(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    report, mkl = torch_and_mkl
    status, message = _openmp(with_requirement_libraries(report, [mkl]))
    assert status == "failed"
    assert message.startswith(
        f"2 OpenMP runtimes in one process: {CHAIN}; vcomp140.dll (MSVC's vcomp) imported by torch/lib/torch_cpu.dll: "
        "each keeps its own thread pool"
    ), message


def test_a_runtime_loaded_by_name_two_levels_down_is_named_with_the_whole_chain(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    # MKL 2021.4's real DLLs import KERNEL32.dll alone: the threading layer loads mkl_core and Intel's OpenMP by name
    report, _mkl = torch_and_mkl
    layer = RequirementLibrary(name="mkl_intel_thread.2.dll", provider=MKL, imports=("KERNEL32.dll",),
                               loads=("mkl_core.2.dll",), loads_recorded_in="cuda_wheels.yaml")  # fmt: skip
    core = RequirementLibrary(name="mkl_core.2.dll", provider=MKL, imports=("KERNEL32.dll",),
                              loads=("libiomp5md.dll",), loads_recorded_in="cuda_wheels.yaml")  # fmt: skip
    runtime = RequirementLibrary(name="libiomp5md.dll", provider="intel-openmp==2021.4.0", imports=("KERNEL32.dll",))
    found = with_requirement_libraries(report, [layer, core, runtime]).openmp_runtimes()
    intel = next(r for r in found if r.name == "libiomp5md.dll")
    assert intel.chains == (
        "loaded by name by mkl_core.2.dll of mkl==2021.4.0 (cuda_wheels.yaml), which mkl_intel_thread.2.dll of "
        "mkl==2021.4.0 loads by name, which torch/lib/torch_cpu.dll imports",
    )
    assert intel.where == ("installed by intel-openmp==2021.4.0",)


def test_upstreams_recorded_set_passes_with_the_finding_in_full(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    report, mkl = torch_and_mkl
    upstream = UpstreamOpenMp(frozenset({"libiomp5md.dll", "vcomp140.dll"}), "upstream's torch 2.3.1 (x.whl)",
                              "companions.yaml upstream_openmp")  # fmt: skip
    status, message = _openmp(with_requirement_libraries(report, [mkl], upstream))
    assert status == "passed"
    assert message.startswith(
        f"upstream's torch 2.3.1 (x.whl) loads 2 OpenMP runtimes in one process: {CHAIN}; vcomp140.dll (MSVC's vcomp) "
        "imported by torch/lib/torch_cpu.dll: passed through as upstream ships it (companions.yaml upstream_openmp"
    ), message


def test_another_set_than_upstreams_fails_saying_what_is_recorded(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    report, mkl = torch_and_mkl
    upstream = UpstreamOpenMp(frozenset({"libomp140.x86_64.dll", "vcomp140.dll"}), "upstream's torch 2.4.0 (y.whl)",
                              "companions.yaml upstream_openmp")  # fmt: skip
    status, message = _openmp(with_requirement_libraries(report, [mkl], upstream))
    assert status == "failed"
    assert CHAIN in message
    assert message.endswith(
        "companions.yaml upstream_openmp records libomp140.x86_64.dll, vcomp140.dll for upstream's torch 2.4.0 "
        "(y.whl), not this set: only exactly that set passes, as upstream ships it"
    ), message


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (SourceInfo("wheel", "https://files.pythonhosted.org/x.whl", UPSTREAM_2_3_1, "", 1717000000, "wheel"), ""),
        (SourceInfo("checkout", "https://github.com/pytorch/pytorch@v2.3.1", "", "63d5e92", 1717000000, "commit"),
         "this wheel was compiled here (https://github.com/pytorch/pytorch@v2.3.1)"),
        (SourceInfo("wheel", "/tmp/rebuilt.whl", "0" * 64, "", 1717000000, "wheel"),
         "this wheel (sha256 000000000000...) is none of them"),
    ],
    ids=["upstream's wheel", "compiled", "another wheel"],
)  # fmt: skip
def test_only_upstreams_own_wheel_of_the_release_is_accepted(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary], source: SourceInfo, why: str
) -> None:
    report, mkl = torch_and_mkl
    plan = torch_plan("win-64", "cpu", "3.12", "2.3.1")
    assert plan.upstream_openmp is not None and plan.upstream_openmp.runtimes == ("libiomp5md.dll", "vcomp140.dll")
    upstream = requirement_libraries.upstream_openmp(plan, source)
    refused = requirement_libraries.not_upstream(plan, source)
    status, message = _openmp(with_requirement_libraries(report, [mkl], upstream, refused))
    if not why:
        assert (status, refused) == ("passed", "")
        assert message.startswith("upstream's torch 2.3.1 (torch-2.3.1-cp312-cp312-win_amd64.whl) loads 2 OpenMP")
        return
    assert upstream is None and status == "failed"
    assert message.startswith(f"2 OpenMP runtimes in one process: {CHAIN}")
    assert message.endswith(
        f"; torchbuild/data/companions.yaml upstream_openmp passes upstream's own wheels of torch 2.3.1 only: {why}"
    ), message


def test_a_release_without_a_record_accepts_nothing() -> None:
    plan = torch_plan("win-64", "cpu", "3.12", "2.5.1")
    source = SourceInfo("wheel", "https://files.pythonhosted.org/x.whl", UPSTREAM_2_3_1, "", 1717000000, "wheel")
    assert plan.upstream_openmp is None
    assert requirement_libraries.upstream_openmp(plan, source) is None
    assert requirement_libraries.not_upstream(plan, source) == ""


def test_torch_and_companions_pass_together_only_with_exactly_upstreams_set(
    torch_and_mkl: tuple[ClosureReport[pe.PeInfo], RequirementLibrary],
) -> None:
    report, mkl = torch_and_mkl
    torch = with_requirement_libraries(report, [mkl]).openmp_runtimes()
    upstream = UpstreamOpenMp(frozenset({"libiomp5md.dll", "vcomp140.dll"}), "upstream's torch 2.3.1 (x.whl)",
                              "companions.yaml upstream_openmp")  # fmt: skip
    problem, line = joint_openmp({"torch": torch, "torchvision": ()}, upstream)
    assert problem == ""
    assert line.startswith("import torch, torchvision: upstream's torch 2.3.1 (x.whl) loads 2 OpenMP runtimes")
    assert ("libiomp5md.dll (Intel's OpenMP) imported by torch (imported by mkl_intel_thread.2.dll of mkl==2021.4.0, "
            "which torch/lib/torch_cpu.dll imports)") in line  # fmt: skip
    assert "passed through as upstream ships it" in line
    problem, _line = joint_openmp({"torch": torch, "torchvision": ()})
    assert problem.startswith("import torch, torchvision loads 2 OpenMP runtimes into one process")
    assert "which torch/lib/torch_cpu.dll imports" in problem


def test_elf_a_declared_requirements_library_needing_gnu_openmp_is_counted() -> None:
    # the loader's view (names): libtorch_cpu.so links libiomp5.so and a requirement's libfoo.so.1, which needs
    # libgomp.so.1 (no nvidia-* library of the CUDA 12.8 set does: measured, see the commit)
    libs = ["torch/lib/libtorch_cpu.so", "torch/lib/libiomp5.so"]
    torch = ElfInfo(path=libs[0], machine="EM_X86_64", soname=None, needed=("libiomp5.so", "libfoo.so.1"), rpath=(),
                    runpath=("$ORIGIN", "$ORIGIN/../../foo/lib"))  # fmt: skip
    report = elf.resolve([torch], libs, policy="manylinux_2_28_x86_64", system=frozenset(),
                         provided={"foo/lib/libfoo.so.1": "foo==1.0"})  # fmt: skip
    foo = RequirementLibrary(name="libfoo.so.1", provider="foo==1.0", imports=("libgomp.so.1", "libc.so.6"))
    check = next(c for c in with_requirement_libraries(report, [foo]).checks() if c.code == "E103")
    assert check.status == "failed"
    assert ("libgomp.so.1 (GNU's OpenMP) imported by libfoo.so.1 of foo==1.0, which torch/lib/libtorch_cpu.so "
            "imports") in check.message  # fmt: skip
    assert "libiomp5.so (Intel's OpenMP) imported by torch/lib/libtorch_cpu.so" in check.message


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"runtimes": ["vcomp140.dll"], "wheels": {"3.12": ["t.whl", "a" * 64]}},
         ": needs two or more runtimes and the wheels (Python -> [file, sha256]) they hold for"),
        ({"runtimes": ["vcomp140.dll", "libiomp5md.dll"], "wheels": {"3.12": ["t.whl", "not-a-sha"]}},
         " wheels 3.12: give [file name, sha256 of 64 hex digits]"),
    ],
    ids=["one runtime", "bad sha256"],
)  # fmt: skip
def test_a_bad_upstream_openmp_row_is_refused_naming_it(row: dict[str, object], problem: str) -> None:
    with pytest.raises(UserError) as info:
        packages = datafiles.raw(companions.DATA_FILE)["packages"]
        companions._parse({"packages": packages, "upstream_openmp": {"win-64": {"2.3.1": row}}})
    assert str(info.value) == f"torchbuild/data/companions.yaml: upstream_openmp win-64 2.3.1{problem}"


def test_a_cuda_set_recorded_free_of_openmp_is_not_fetched(tmp_path: Path) -> None:
    """torch 2.10.0's CUDA 12.8 set (15 wheels, 3.0 GB) is recorded as read (cuda_wheels.yaml no_openmp): the count
    takes every library of it, imports none, and the cache stays empty."""
    plan = resolve(Cell(platform="linux-64", cuda="12.8", python="3.11", torch="2.10.0"), load(ROOT / "matrix.yaml"))
    cache = tmp_path / "cache"
    found = requirement_libraries.read(plan, cache, tmp_path / "log", "repair")
    assert {lib.name for lib in found} >= {"libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnccl.so.2"}
    assert all(lib.imports == () and lib.loads == () for lib in found)
    assert not cache.exists() or not any(cache.rglob("*"))
