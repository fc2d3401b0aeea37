"""Real wheels whose libraries come from their declared requirements: PyPI's torch 2.3.1 win_amd64 wheel (MKL from
`mkl`) through the pipeline as a user runs it (without Wine: tests/integration/test_wine.py's kind of run does the
loader check and the smoke), and PyPI's torch 2.10.0 linux wheel (CUDA 12.8 from nvidia-*-cu12) through the ELF
closure check. Both wheels are downloaded once into the pipeline's cache (2.10.0's is 915 MB)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.builders import torch_plan
from tests.conftest import REPODATA, ROOT
from torchbuild.config.options import RunOptions
from torchbuild.knowledge import cuda_wheels
from torchbuild.platforms.closure import with_hints
from torchbuild.platforms.linux import elf
from torchbuild.platforms.windows import pe
from torchbuild.stages.source import fetch

pytestmark = pytest.mark.slow

CELL = "win-64-cpu-py3.12-torch2.3.1"
ARGS = ("--platform", "win-64", "--cuda", "cpu", "--py", "3.12", "--torch", "2.3.1")


@pytest.fixture(scope="module")
def torch_2_3_1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = torch_plan("win-64", "cpu", "3.12", "2.3.1")
    return fetch(plan, RunOptions().cache_dir, tmp_path_factory.mktemp("fetch") / "pip.log", version=plan.torch).path


def test_torch_2_3_1_imports_mkl_that_only_its_requirement_provides(torch_2_3_1: Path) -> None:
    plan = torch_plan("win-64", "cpu", "3.12", "2.3.1")
    bare = pe.check_wheel(torch_2_3_1, python="3.12")
    assert "mkl_intel_thread.1.dll" in bare.missing_names
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    assert "mkl_intel_thread.1.dll" not in pe.check_wheel(torch_2_3_1, python="3.12", provided=provided).missing_names


def test_the_pipeline_leaves_mkl_to_its_requirement(torch_2_3_1: Path, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(ROOT),
           "PATH": str(Path(sys.executable).parent)}  # no Wine: the loader check and the smoke say skipped
    run = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *ARGS, "--matrix", str(ROOT / "matrix.yaml"), "--wheel",
         str(torch_2_3_1), "--repodata", str(REPODATA), "--compression-level", "1",
         "--packages", "torch"],  # torchvision beside torch: test_windows.py's (issue 28)
        cwd=tmp_path, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "left to the declared requirements: mkl_intel_thread.1.dll from mkl==2021.4.0" in output
    work = tmp_path / "build" / CELL
    repaired = next((work / "repair").glob("*.whl"))
    with zipfile.ZipFile(repaired) as archive:
        names = archive.namelist()
        document = json.loads(archive.read(next(n for n in names if n.endswith("sboms/torchbuild.cdx.json"))))
    assert not [n for n in names if Path(n).name.lower().startswith("mkl_")]
    mkl = next(c for c in document["components"] if c["name"] == "mkl")
    assert (mkl["version"], mkl["scope"]) == ("2021.4.0", "required")
    checks = {c["code"]: c for c in json.loads((work / "verify" / "checks.json").read_text())}
    assert checks["TB105"]["status"] == "passed"  # torch_cpu.dll's MKL import resolves to the mkl run dependency
    assert checks["TB301"]["status"] == "passed", checks["TB301"]["message"]
    # two OpenMP runtimes, as upstream ships them: the repair and verify (in the conda environment) say so
    assert f"upstream's torch 2.3.1 ({UPSTREAM_WHEEL}) loads 2 OpenMP runtimes in one process: " in output
    said = checks["P103"]["message"]  # the conda package's files lie below Lib/site-packages
    assert checks["P103"]["status"] == "passed" and "passed through as upstream ships it" in said, said
    assert MKL_CHAIN.replace("torch/lib", "Lib/site-packages/torch/lib") in said, said


UPSTREAM_WHEEL = "torch-2.3.1-cp312-cp312-win_amd64.whl"
MKL_CHAIN = (
    "libiomp5md.dll (Intel's OpenMP) loaded by name by mkl_intel_thread.1.dll of mkl==2021.4.0 (cuda_wheels.yaml), "
    "which torch/lib/torch_cpu.dll imports"
)


def test_the_closure_names_both_openmp_runtimes_of_torch_2_3_1_and_passes_upstreams_own_wheel_only(
    torch_2_3_1: Path, tmp_path: Path
) -> None:
    """PyPI's wheel, its closure as the repair follows it: torch_cpu.dll imports vcomp140.dll and mkl_intel_thread.1.dll
    of the `mkl` requirement, which loads Intel's libiomp5md.dll: two runtimes, each named with its chain, passed
    where the wheel is upstream's own file (companions.yaml upstream_openmp, by sha256; the whole pipeline run above
    shows the repair and verify saying so), failed for the same closure of a wheel compiled here."""
    from torchbuild.config import matrix
    from torchbuild.config.matrix import Cell
    from torchbuild.plan import resolve
    from torchbuild.stages import requirement_libraries
    from torchbuild.wheel.provenance import SourceInfo

    cell = Cell(platform="win-64", cuda="cpu", python="3.12", torch="2.3.1")
    plan = resolve(cell, matrix.with_packages(matrix.load(ROOT / "matrix.yaml"), "torch"))
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    closure = pe.check_wheel(torch_2_3_1, python="3.12", provided=provided)
    cache, log = RunOptions().cache_dir, tmp_path / "log"

    sha256 = hashlib.sha256(torch_2_3_1.read_bytes()).hexdigest()
    upstream = SourceInfo("wheel", "https://pypi.org/simple/torch/", sha256, "", 1717000000, "the wheel's RECORD")
    accepted = requirement_libraries.follow(closure, plan, upstream, cache, log, "test").openmp_check()
    assert accepted.status == "passed"
    assert accepted.message.startswith(
        f"upstream's torch 2.3.1 ({UPSTREAM_WHEEL}) loads 2 OpenMP runtimes in one process: {MKL_CHAIN}; "
        "vcomp140.dll (MSVC's vcomp) imported by torch/bin/fbgemm.dll, torch/lib/fbgemm.dll, torch/lib/torch_cpu.dll: "
        "passed through as upstream ships it (torchbuild/data/companions.yaml upstream_openmp"
    ), accepted.message

    compiled = SourceInfo("checkout", "https://github.com/pytorch/pytorch@v2.3.1", "", "63d5e92", 1717000000, "commit")
    check = requirement_libraries.follow(closure, plan, compiled, cache, log, "test").openmp_check()
    assert check.status == "failed"
    assert check.message.startswith(f"2 OpenMP runtimes in one process: {MKL_CHAIN}; vcomp140.dll"), check.message
    assert "passes upstream's own wheels of torch 2.3.1 only: this wheel was compiled here" in check.message


def test_torch_2_10_0s_cuda_libraries_resolve_to_its_nvidia_requirements(tmp_path: Path) -> None:
    plan = torch_plan("linux-64", "12.8", "3.11", "2.10.0")
    assert plan.prebuilt_unlabelled
    wheel = fetch(plan, RunOptions().cache_dir, tmp_path / "pip.log", version=plan.torch).path
    beside = cuda_wheels.site_packages_libraries(plan.declared_libraries)
    report = elf.check_wheel(wheel, "manylinux_2_28_x86_64", scratch=tmp_path, provided=beside)
    assert report.ok, report.summary()
    via = {r.needed: r for r in report.resolved if r.via == "dependency"}
    assert via["libcudart.so.12"].target.startswith("nvidia/cuda_runtime/lib/libcudart.so.12, installed by "
                                                    "nvidia-cuda-runtime-cu12==12.8.90")  # fmt: skip
    assert {"libcublas.so.12", "libcudnn.so.9", "libnccl.so.2", "libnvshmem_host.so.3"} <= set(via)
    # Without the requirements, the same wheel misses them, each named with the requirement that provides it
    bare = elf.check_wheel(wheel, "manylinux_2_28_x86_64", scratch=tmp_path)
    hinted = with_hints(bare, lambda name: cuda_wheels.should_have_provided(name, plan.declared_libraries))
    gap = next(m for m in hinted.missing if m.needed == "libcudart.so.12")
    assert "the declared requirement nvidia-cuda-runtime-cu12==12.8.90" in gap.message


# ~3 minutes (delvewheel over 160 MB of torch plus 635 MB of MKL): the nightly carries it, CI's time carries the linux
# CUDA cell instead; the vendor choice's plan, refusals and cell id run in CI (tests/unit/test_declared_choice.py).
@pytest.mark.nightly
def test_the_vendored_repair_puts_mkl_into_torch_2_3_1_and_drops_the_requirement(
    torch_2_3_1: Path, tmp_path: Path
) -> None:
    """declared_libraries: vendor on the same real wheel: the source and repair stages as the runner calls them. The
    repaired wheel carries what torch's DLLs import of mkl 2021.4.0 (mkl_intel_thread, mkl_core) and the kernels
    mkl_core loads by name (cuda_wheels.yaml), from the pinned mkl wheel; its METADATA no longer requires mkl, its
    RECORD is right, and its import closure is complete without any declared requirement."""
    from torchbuild.config import matrix
    from torchbuild.config.matrix import Cell
    from torchbuild.plan import resolve
    from torchbuild.stages import Context
    from torchbuild.stages import source as source_stage
    from torchbuild.stages.repair import stage as repair
    from torchbuild.wheel import checks as wheel_checks
    from torchbuild.wheel.wheelfile import read_metadata

    cell = Cell(platform="win-64", cuda="cpu", python="3.12", torch="2.3.1", declared_libraries="vendor")
    plan = resolve(cell, matrix.with_packages(matrix.load(ROOT / "matrix.yaml"), "torch"))
    assert plan.declared_libraries == () and [w.name for w in plan.vendored_libraries] == ["mkl", "intel-openmp", "tbb"]
    options = RunOptions(wheel=torch_2_3_1)
    source = source_stage.run(Context(plan=plan, root=tmp_path, options=options))
    inputs = {"built_wheel": source.outputs["source_wheel"], "source_info": source.outputs["source_info"]}
    result = repair.run(Context(plan=plan, root=tmp_path, options=options, inputs=inputs))

    repaired = result.outputs["repaired_wheel"].path
    with zipfile.ZipFile(repaired) as archive:
        names = {Path(n).name.lower(): n for n in archive.namelist()}
        dist_info = next(n.split("/")[0] for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert wheel_checks.record_problems(archive, dist_info) == []
        document = json.loads(archive.read(f"{dist_info}/sboms/torchbuild.cdx.json"))
    kernels = dict(plan.vendored_libraries[0].loaded_by_name)["mkl_core.1.dll"]
    for dll in ("mkl_intel_thread.1.dll", "mkl_core.1.dll", *kernels):
        assert names.get(dll, "").startswith("torch.libs/"), f"{dll} is not vendored"
    assert "mkl_tbb_thread.1.dll" not in names and "tbb12.dll" not in names  # not in the closure: not vendored
    requires = read_metadata(repaired).get_all("Requires-Dist") or []
    assert requires and not [r for r in requires if r.lower().startswith("mkl")]
    assert f"Requires-Dist dropped: {plan.vendored_libraries[0].requirement}" in result.message, result.message
    checks = {(c.code, c.name): c for c in result.checks}
    closure = next(c for (code, _), c in checks.items() if code == "P100")
    assert closure.status == "passed" and "0 missing" in closure.message, closure.message
    shipped = [c for (code, _), c in checks.items() if code == "P103"]
    assert {c.name for c in shipped} >= {f"ships {dll} (loaded by name)" for dll in kernels}
    assert all(c.status == "passed" for c in shipped)
    # the SBOM names the mkl wheel as where the vendored DLLs came from (not as a required dependency)
    mkl = next(c for c in _components(document) if c["name"] == "mkl")
    assert (mkl["version"], mkl.get("scope")) == ("2021.4.0", None)
    assert mkl["hashes"] == [{"alg": "SHA-256", "content": plan.vendored_libraries[0].sha256}]
    assert any(c["name"] == "torch.libs/mkl_core.1.dll" for c in _components(document))


def _components(document: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    todo = list(document.get("components", []))
    while todo:
        component = todo.pop()
        found.append(component)
        todo += component.get("components", [])
    return found
