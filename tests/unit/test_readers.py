"""One reader per fact: a dotted version's one sort key (knowledge/compat.version_key, which verify's solve, the
interpreter search, the VC runtime floor and the companions' Python list use), repodata.json's one reader
(channels/repodata.py, which the local channel and verify's solve use), on real files; and why one OpenMP runtime per
process, written once (platforms/closure.py), as both checks say it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchbuild.channels import repodata
from torchbuild.knowledge.compat import version_key
from torchbuild.platforms.closure import OpenMpRuntime, joint_openmp
from torchbuild.platforms.linux import elf
from torchbuild.platforms.linux.elf import ElfInfo


def test_a_dotted_versions_key_sorts_a_part_that_is_not_a_number_before_every_number() -> None:
    versions = ["3.12.10", "3.13.0", "3.12.9", "3.13.0rc1", "14.44.35211.0", "9.0"]
    assert sorted(versions, key=version_key) == ["3.12.9", "3.12.10", "3.13.0rc1", "3.13.0", "9.0", "14.44.35211.0"]


def test_a_subdirs_records_are_read_by_file_name_from_both_sections(tmp_path: Path) -> None:
    index = tmp_path / "repodata.json"
    old = {"name": "pytorch", "version": "2.5.1", "depends": ["python >=3.11,<3.12.0a0"]}
    new = {"name": "pytorch", "version": "2.5.1", "depends": ["python >=3.12,<3.13.0a0"]}
    index.write_text(json.dumps({"info": {"subdir": "win-64"}, "packages": {"pytorch-2.5.1-0.tar.bz2": old},
                                 "packages.conda": {"pytorch-2.5.1-1.conda": new}}), encoding="utf-8")  # fmt: skip
    assert repodata.recorded(index) == {"pytorch-2.5.1-0.tar.bz2": old, "pytorch-2.5.1-1.conda": new}
    assert repodata.listed(repodata.load(index)) == repodata.recorded(index)


def test_a_missing_or_broken_index_records_nothing_leniently_and_fails_strictly(tmp_path: Path) -> None:
    broken = tmp_path / "repodata.json"
    broken.write_text('{"packages": {', encoding="utf-8")
    assert repodata.recorded(broken) == {} and repodata.recorded(tmp_path / "absent.json") == {}
    with pytest.raises(ValueError):
        repodata.load(broken)


WHY = "each keeps its own thread pool (Intel's aborts with 'OMP: Error #15'{}, the others can give wrong results "
WHY += "silently, pytorch/pytorch#193784)"


def test_a_packages_two_openmp_runtimes_say_why_one_per_process() -> None:
    libs = ["torch/lib/libtorch_cpu.so", "torch/lib/libgomp-a34b3233.so.1", "torch/lib/libiomp5.so", "torch/lib/x.so"]
    elves = [ElfInfo(path=path, machine="EM_X86_64", soname=None, needed=(needed,), rpath=(), runpath=("$ORIGIN",))
             for path, needed in ((libs[0], "libgomp-a34b3233.so.1"), (libs[3], "libiomp5.so"))]  # fmt: skip
    report = elf.resolve(elves, libs, policy="manylinux_2_28_x86_64", system=frozenset())
    assert report.openmp_problem() == (
        "2 OpenMP runtimes in one process: libgomp-a34b3233.so.1 (GNU's OpenMP) imported by torch/lib/libtorch_cpu.so; "
        f"libiomp5.so (Intel's OpenMP) imported by torch/lib/x.so: {WHY.format('')}"
    )


def test_two_packages_bringing_two_runtimes_into_one_process_say_why_one_per_process() -> None:
    vcomp = OpenMpRuntime("vcomp140.dll", "MSVC's vcomp", ("torch/lib/torch_cpu.dll",), ("torch/lib",))
    hashed = OpenMpRuntime("vcomp140-1a2b3c4d.dll", "MSVC's vcomp", ("torchaudio/x.pyd",), ("torchaudio.libs",))
    problem, line = joint_openmp({"torch": (vcomp,), "torchaudio": (hashed,)})
    assert (problem, line) == (
        "import torch, torchaudio loads 2 OpenMP runtimes into one process: vcomp140-1a2b3c4d.dll (MSVC's vcomp) "
        "imported by torchaudio (torchaudio/x.pyd) | vcomp140.dll (MSVC's vcomp) imported by torch "
        f"(torch/lib/torch_cpu.dll): {WHY.format(' beside another copy of itself')}",
        "",
    )
