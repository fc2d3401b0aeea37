"""A companion beside a linux CUDA torch (issue 28): its extensions' torch and CUDA libraries resolve to what `import
torch` loaded first (torch's wheel, torch's declared nvidia-* requirements), anything else is named missing; the
source stage relabels PyPI's unlabelled companion wheel only where its own version.py says it is the cell's build."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.errors import StageFailed
from torchbuild.platforms.linux import elf
from torchbuild.results import Check
from torchbuild.stages.repair.dependent_elf import loaded_first, torch_libraries
from torchbuild.stages.repair.finish import bundled_row, package_outputs
from torchbuild.stages.source import _relabel_companion
from torchbuild.wheel.repair_report import RepairReport

TAG = "manylinux_2_28_x86_64"


def _extension(path: str, *needed: str) -> elf.ElfInfo:
    # torchvision 0.25.0's _C.so as readelf shows it: no search path that reaches torch/lib or nvidia/*/lib
    return elf.ElfInfo(path=path, machine="EM_X86_64", soname=None, needed=needed,
                       rpath=("/__w/_temp/conda_environment_21142521590/lib",), runpath=())  # fmt: skip


def _resolve(loaded: dict[str, str], *needed: str) -> elf.ClosureReport[elf.ElfInfo]:
    name, system, machine = elf.policy_for(TAG)
    files = ["torchvision/_C.so"]
    return elf.resolve([_extension(files[0], *needed)], files, policy=name, system=system, machine=machine,
                       loaded=loaded)  # fmt: skip


def test_torch_and_cuda_libraries_resolve_to_what_import_torch_loaded(tmp_path: Path) -> None:
    plan = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
    files = {"torch/lib/libc10.so": b"", "torch/lib/libtorch_cuda.so": b"", "torch/__init__.py": b""}
    torch = make_wheel(tmp_path, "torch-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl", files)
    assert torch_libraries(torch) == {
        "libc10.so": f"torch/lib/libc10.so in torch's {torch.name}",
        "libtorch_cuda.so": f"torch/lib/libtorch_cuda.so in torch's {torch.name}",
    }
    loaded = loaded_first(torch, plan.declared_libraries)
    assert loaded["libcudart.so.12"] == (
        "nvidia/cuda_runtime/lib/libcudart.so.12, installed by nvidia-cuda-runtime-cu12==12.8.90 "
        "(nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) (torch's declared "
        "requirement)"
    )
    report = _resolve(loaded, "libc10.so", "libtorch_cuda.so", "libcudart.so.12", "libc.so.6")
    assert report.ok and report.count("loaded") == 3 and report.count("system") == 1
    assert "3 loaded first by the package it extends" in report.summary()


def test_a_library_nothing_loaded_first_is_missing_naming_it_and_its_importer(tmp_path: Path) -> None:
    """A CUDA 13 companion beside a CUDA 12.8 torch: libcudart.so.13 is neither torch's nor its requirements'."""
    plan = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
    torch = make_wheel(tmp_path, "torch-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl",
                       {"torch/lib/libc10.so": b""})  # fmt: skip
    report = _resolve(loaded_first(torch, plan.declared_libraries), "libc10.so", "libcudart.so.13")
    assert not report.ok
    assert [(m.file, m.needed) for m in report.missing] == [("torchvision/_C.so", "libcudart.so.13")]


def _companion_wheel(tmp_path: Path, version_py: str) -> Path:
    return make_wheel(tmp_path, "torchaudio-2.10.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                      {"torchaudio/version.py": version_py.encode(), "torchaudio/__init__.py": b""})  # fmt: skip


def test_an_unlabelled_companion_proven_by_its_version_py_is_relabelled_as_torch_is(tmp_path: Path) -> None:
    plan = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
    wheel = _companion_wheel(tmp_path, "__version__ = '2.10.0+cu128'\ngit_version = 'x'\n")
    artifact, note = _relabel_companion(wheel, "torchaudio", plan, tmp_path / "out")
    assert artifact.path.name == "torchaudio-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert note == "; unlabelled, its torchaudio/version.py says '2.10.0+cu128': re-versioned to 2.10.0+cu128"
    with zipfile.ZipFile(artifact.path) as archive:
        assert "Version: 2.10.0+cu128" in archive.read("torchaudio-2.10.0+cu128.dist-info/METADATA").decode()


def test_a_companion_of_another_cuda_is_not_relabelled(tmp_path: Path) -> None:
    plan = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
    wheel = _companion_wheel(tmp_path, "__version__ = '2.10.0+cu130'\n")
    with pytest.raises(StageFailed) as refused:
        _relabel_companion(wheel, "torchaudio", plan, tmp_path / "out")
    assert (
        "is not the cu128 build this cell's torch needs: its torchaudio/version.py says __version__ = "
        "'2.10.0+cu130', not '2.10.0+cu128'"
    ) in str(refused.value)
    assert not list((tmp_path / "out").glob("**/*.whl"))


def test_a_companions_repair_ends_with_its_report_or_fails_removing_the_wheel(tmp_path: Path) -> None:
    """The end both companion repairs share (finish.py): every check passed, repair-<name>.json is written beside
    the wheel and both are the stage's outputs; a failed check fails the stage naming it, the wheel removed."""
    (vision,) = torch_plan("win-64", "cpu", "3.11", "2.5.1").dependents
    row = bundled_row(vision, "torchvision/libpng16.dll", b"png", "1.6.37")
    assert (row.provider, row.origin, row.origin_name, row.origin_version) == (
        "upstream wheel", vision.wheel, "torchvision", "0.20.1")  # fmt: skip
    assert (row.size, row.sha256[:8], row.version) == (3, "8f8cbb7d", "1.6.37")
    target = make_wheel(tmp_path, vision.wheel, {"torchvision/__init__.py": b""})
    report = RepairReport(wheel=target.name, platform="win-64", vendored=(row,))
    passed = [Check(name="closure", status="passed", message="complete")]
    outputs = package_outputs(vision, target, passed, report, "is not self-contained beside torch")
    written = tmp_path / "repair-torchvision.json"
    assert {name: a.path for name, a in outputs.items()} == {
        "repaired_wheel[torchvision]": target, "repair_report[torchvision]": written}  # fmt: skip
    assert RepairReport.read(written) == report
    written.unlink()
    failed = [*passed, Check(name="closure", status="failed", message="c10.dll: not found")]
    with pytest.raises(StageFailed) as caught:
        package_outputs(vision, target, failed, report, "is not self-contained beside torch")
    assert str(caught.value) == (
        f"repair: the repaired {target.name} is not self-contained beside torch: c10.dll: not found")
    assert caught.value.checks == tuple(failed)
    assert list(tmp_path.iterdir()) == []  # the wheel removed, no report written
