"""The runtime DLLs of win-64 artifacts, read from the binaries (issue: the right runtime DLLs, once).

On PyPI's torch 2.14.1 win_amd64 wheel: what the repair vendors is derived from its import tables (msvcp140.dll,
vcruntime140_1.dll, and the two that 2.14.1 adds: msvcp140_atomic_wait.dll, vcruntime140_threads.dll), the VC runtime
floor is the MSVC 14.42 that linked its DLLs, and the conda package depends on vc14_runtime >=14.42 and leaves out
every runtime DLL its dependencies install (libiomp5md.dll, the VC runtime). On small wheels of real PE files: a
runtime older than the floor is refused, and a package whose dependency is missing fails the environment closure."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from tests.builders import make_wheel, source_info, torch_plan
from tests.conftest import ROOT, Scratch
from tests.integration.test_windows import Run, pipeline
from tests.pe_fixtures import PeFixtures, with_linker
from torchbuild.conda.archive import read_package
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.results import Artifact, sha256_of
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.source import fetch
from torchbuild.stages.verify.environment import environment_checks
from torchbuild.wheel import sbom
from torchbuild.wheel.repair_report import RepairReport

pytestmark = pytest.mark.slow
CELL = "win-64-cpu-py3.11-torch2.14.1"


@pytest.fixture(scope="module")
def wheel_2_14_1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    return fetch(plan, RunOptions().cache_dir, tmp_path_factory.mktemp("fetch") / "pip.log", version=plan.torch).path


@pytest.fixture(scope="module")
def new_run(wheel_2_14_1: Path, module_scratch: Scratch) -> Run:
    workspace = module_scratch("win-2.14.1")
    # torch's runtimes alone: torchvision beside torch is test_windows.py's (issue 28)
    return Run(workspace, pipeline(workspace, "--wheel", str(wheel_2_14_1), "--torch", "2.14.1", "--packages", "torch"))


def _report(run: Run, cell: str) -> RepairReport:
    return RepairReport.read(run.workspace / "build" / cell / "repair" / "repair.json")


def test_torch_2_14_1_vendors_what_it_imports_and_sets_the_floor_14_42(new_run: Run) -> None:
    assert new_run.result.returncode == 0, new_run.output[-3000:]
    report = _report(new_run, CELL)
    vendored = {Path(v.path).name: v for v in report.vendored}
    assert set(vendored) == {
        "msvcp140.dll", "vcruntime140_1.dll", "msvcp140_atomic_wait.dll", "vcruntime140_threads.dll"
    }  # fmt: skip
    assert all(v.path.startswith("torch.libs/") and v.provider == "msvc-runtime" for v in vendored.values())
    assert vendored["msvcp140.dll"].version == "14.44.35211.0"  # the DLL's FileVersion, not the wheel's 14.44.35112
    assert report.vc_runtime_floor is not None and report.vc_runtime_floor.version == "14.42"
    assert report.vc_runtime_floor.set_by.startswith("torch/")
    assert "VC runtime floor MSVC 14.42" in new_run.output


def test_the_sbom_of_the_real_wheel_is_valid_cyclonedx_and_names_each_vendored_file(new_run: Run) -> None:
    repaired = next((new_run.workspace / "build" / CELL / "repair").glob("*.whl"))
    with zipfile.ZipFile(repaired) as archive:
        text = archive.read(f"torch-2.14.1+cpu.dist-info/sboms/{sbom.FILE_NAME}").decode("utf-8")
        libs = [n for n in archive.namelist() if n.startswith("torch.libs/")]
        digests = {n: hashlib.sha256(archive.read(n)).hexdigest() for n in libs}
        record = archive.read("torch-2.14.1+cpu.dist-info/RECORD").decode("utf-8")
    assert f"torch-2.14.1+cpu.dist-info/sboms/{sbom.FILE_NAME}," in record
    assert sbom.schema_problem(text) is None
    rows = sbom.rows(json.loads(text))
    files = {row.component: row for row in rows if row.is_file}
    assert set(files) == set(digests)  # every vendored file, and only those
    for path, row in files.items():
        assert row.sha256 == digests[path], path
        assert row.origin.startswith("pkg:pypi/msvc-runtime@14.44.35112") and row.version.startswith("14.44.")
        assert "(Microsoft Corporation; root Microsoft Root Certificate Authority 2011)" in row.signer
    torch = rows[0]
    assert (torch.component, torch.version) == ("torch", "2.14.1+cpu")
    assert torch.origin.endswith("/torch-2.14.1-cp311-cp311-win_amd64.whl") and len(torch.sha256) == 64
    shown = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "sbom", str(repaired)], capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "torch.libs/msvcp140.dll" in shown.stdout and "pkg:pypi/msvc-runtime@14.44.35112" in shown.stdout
    assert "4 vendored files; CycloneDX 1.6" in shown.stdout


# ~90 s: the nightly carries it (CI's time); tests/unit/test_repro.py proves the same on small artifacts in CI
@pytest.mark.nightly
def test_a_forced_rebuild_gives_the_same_bytes(new_run: Run, wheel_2_14_1: Path) -> None:
    made = [next((new_run.workspace / "build" / CELL / stage).glob(glob)) for stage, glob in
            (("repair", "*.whl"), ("conda", "*.conda"))]  # fmt: skip
    before = [sha256_of(path) for path in made]
    again = pipeline(new_run.workspace, "--wheel", str(wheel_2_14_1), "--torch", "2.14.1", "--packages", "torch",
                     "--force")
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert [sha256_of(path) for path in made] == before
    assert "not reproducible" not in again.stdout + again.stderr


def test_the_conda_package_shares_the_environments_runtimes(new_run: Run) -> None:
    pkg = read_package(next((new_run.workspace / "build" / CELL / "conda").glob("*.conda")))
    assert "vc14_runtime >=14.42" in pkg.index["depends"]
    names = {m.name.removeprefix("Lib/site-packages/") for m in pkg.files()}
    assert "torch/lib/libiomp5md.dll" not in names and not any(n.startswith("torch.libs/") for n in names)
    assert {"torch/lib/c10.dll", "torch/lib/torch_cpu.dll", "torch/lib/uv.dll"} <= names
    verified = new_run.workspace / "build" / CELL / "verify" / "checks.json"
    checks = {c["code"]: c for c in json.loads(verified.read_text())}
    for code in ("TB105", "TB106", "TB107"):
        assert checks[code]["status"] == "passed", checks[code]
    assert "from run dependencies" in checks["TB105"]["message"]
    assert "left out, provided by run dependencies: torch.libs/msvcp140.dll (vc14_runtime)" in new_run.output
    assert "torch/lib/libiomp5md.dll (intel-openmp)" in new_run.output
    # The wheel keeps its copies: pip has no such packages.
    with zipfile.ZipFile(next((new_run.workspace / "build" / CELL / "repair").glob("*.whl"))) as archive:
        assert {"torch/lib/libiomp5md.dll", "torch.libs/msvcp140.dll"} <= set(archive.namelist())


def test_the_rendered_recipe_states_the_packages_run_requirements(new_run: Run) -> None:
    import yaml

    from torchbuild.stages.conda.recipe import apply_selectors

    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    recipe = (new_run.workspace / "build" / CELL / "recipe" / "meta.yaml").read_text()
    meta = yaml.safe_load(apply_selectors(recipe, plan.selectors))
    pkg = read_package(next((new_run.workspace / "build" / CELL / "conda").glob("*.conda")))
    assert sorted(meta["requirements"]["run"]) == sorted(pkg.index["depends"])
    assert meta["extra"]["torchbuild"]["left_out"] == ["torch.libs/msvcp140.dll", "torch.libs/msvcp140_atomic_wait.dll",
        "torch.libs/vcruntime140_1.dll", "torch.libs/vcruntime140_threads.dll", "torch/lib/libiomp5md.dll",
        "torch/lib/libiompstubs5md.dll"]  # fmt: skip


# --- small wheels of real PE files -------------------------------------------------------------------------


def test_a_runtime_older_than_the_floor_is_refused(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    """An extension linked by MSVC 14.50 needs msvcp140.dll >= 14.50; the provider's is 14.44: nothing is written."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    newer = with_linker(pe_fixtures.ext, tmp_path / "ext.pyd", "14.50")
    files = {"torch/__init__.py": b"", "torch/_C.cp311-win_amd64.pyd": newer.read_bytes()}
    wheel = make_wheel(tmp_path, plan.root.wheel, files)
    inputs = {"built_wheel": Artifact.of(wheel), "source_info": source_info(tmp_path, wheel)}
    ctx = Context(plan=plan, root=tmp_path / "work", options=RunOptions(), inputs=inputs)
    with pytest.raises(StageFailed) as info:
        repair.run(ctx)
    message = str(info.value)
    assert "refusing to vendor" in message and "msvcp140.dll is 14.44.35211.0" in message
    assert "older than the MSVC 14.50 that linked torch/_C.cp311-win_amd64.pyd" in message
    assert not list((tmp_path / "work").rglob("*.whl"))


def test_a_dependency_the_package_counts_on_must_be_there(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    """The package leaves msvcp140.dll to vc14_runtime; verified against a cell that has no such dependency, the
    environment closure names the DLL that nothing provides."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    members = {"torch/__init__.py": b"", "torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext.read_bytes()}
    wheel = make_wheel(tmp_path, plan.root.wheel, members)
    ctx = Context(plan=plan, root=tmp_path, options=RunOptions(compression_level=1))
    info = source_info(tmp_path / "source", wheel)
    repaired = repair.run(replace(ctx, inputs={"built_wheel": Artifact.of(wheel), "source_info": info})).outputs
    package = conda.run(replace(ctx, inputs={**repaired, "source_info": info})).outputs["conda_package"]
    report = RepairReport.read(repaired["repair_report"].path)
    pkg = read_package(package.path)
    ok = {c.code: c for c in environment_checks(pkg, plan, report)}
    assert ok["TB105"].status == "passed", ok["TB105"].message
    without = {k: v for k, v in plan.conda.provided_dlls.items() if v != "vc14_runtime"}
    bare = replace(plan, conda=replace(plan.conda, provided_dlls=without))
    failed = {c.code: c for c in environment_checks(pkg, bare, report)}
    assert failed["TB105"].status == "failed"
    assert "imports MSVCP140.dll, which is neither in the package" in failed["TB105"].message
