"""win-64 on this Linux host, with real Windows binaries: `python pipeline.py --platform win-64 --cuda cpu --py 3.11
--torch 2.5.1` takes PyPI's torch 2.5.1 win_amd64 wheel (downloaded once into the pipeline's cache), repairs it with
delvewheel, checks its DLL import closure, packages it for conda and solves it against the real conda-forge
repodata; the loader check and smoke need Wine and are skipped here (tests/integration/test_wine.py runs them). Bad
inputs are small wheels of real PE files (mingw-w64)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.conftest import REPODATA, ROOT, Scratch
from tests.pe_fixtures import PeFixtures
from torchbuild.config.options import RunOptions
from torchbuild.host import downloads
from torchbuild.knowledge import companions
from torchbuild.platforms.closure import joint_openmp
from torchbuild.platforms.windows import pe, wine
from torchbuild.stages.source import fetch

CELL = "win-64-cpu-py3.11-torch2.5.1"
ARGS = ("--platform", "win-64", "--cuda", "cpu", "--py", "3.11", "--torch", "2.5.1")
TORCH_ONLY = ("--packages", "torch")  # a small torch wheel of test DLLs cannot serve PyPI's torchvision


def pipeline(workspace: Path, *args: str, with_wine: bool = False) -> subprocess.CompletedProcess[str]:
    """The pipeline as a user runs it. Without ``with_wine`` it runs as on a Linux host without Wine (PATH holds only
    Python's folder): the loader check and the smoke are skipped, as these tests are about the other stages and
    tests/integration/test_wine.py runs the Wine ones."""
    env = {**os.environ, "COLUMNS": "200", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(ROOT)}
    if not with_wine:
        env["PATH"] = str(Path(sys.executable).parent)
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *ARGS, "--matrix", str(ROOT / "matrix.yaml"), *args,
         "--repodata", str(REPODATA), "--compression-level", "1"],
        cwd=workspace, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


@dataclass(frozen=True)
class Run:
    workspace: Path
    result: subprocess.CompletedProcess[str]

    def stage_dir(self, stage: str) -> Path:
        return self.workspace / "build" / CELL / stage

    @property
    def repaired(self) -> Path:
        return self.stage_dir("repair") / "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl"

    @property
    def output(self) -> str:
        return self.result.stdout + self.result.stderr

    @property
    def checks(self) -> dict[str, dict[str, str]]:
        return {c["code"]: c for c in json.loads((self.stage_dir("verify") / "checks.json").read_text())}


@pytest.fixture(scope="session")
def torch_win_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PyPI's torch 2.5.1 cp311 win_amd64 wheel, through the source stage's pip download and sha256 cache."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    assert plan.prebuilt_unlabelled
    return fetch(plan, RunOptions().cache_dir, tmp_path_factory.mktemp("fetch") / "pip.log", version=plan.torch).path


@pytest.fixture(scope="module")
def win_run(torch_win_wheel: Path, module_scratch: Scratch) -> Run:
    workspace = module_scratch("win")
    # the default packages: torchaudio 2.5.1 is left out by the plan (a second OpenMP runtime beside torch 2.5.1's)
    return Run(workspace, pipeline(workspace, "--wheel", str(torch_win_wheel)))


@pytest.mark.slow
def test_upstream_wheel_fails_the_closure_check_naming_msvcp140(torch_win_wheel: Path) -> None:
    report = pe.check_wheel(torch_win_wheel, python="3.11")
    assert not report.ok
    assert report.missing_names == ("msvcp140.dll", "vcruntime140_1.dll")
    assert any(m.file == "torch/lib/c10.dll" and m.needed.lower() == "msvcp140.dll" for m in report.missing)


@pytest.mark.slow
def test_pipeline_runs_every_stage_but_smoke_without_wine(win_run: Run) -> None:
    assert win_run.result.returncode == 0, win_run.output[-3000:]
    out = win_run.output
    for stage in ("source", "repair", "conda", "verify", "publish"):
        assert f"✓ {stage}" in out
    assert "skipped: needs a win-64 host or Wine (apt-get install wine64)" in out
    assert (win_run.workspace / "channel" / "win-64" / "pytorch-2.5.1-py3.11_cpu_0.conda").is_file()
    assert list((win_run.workspace / "channel").rglob("torch-2.5.1+cpu-cp311-cp311-win_amd64.whl"))
    scripts = win_run.checks["TB208"]  # with no smoke here, the static twin of its console-scripts check speaks
    assert scripts["status"] == "passed"
    assert scripts["message"].startswith(
        "1 of 4 console scripts name a module in the wheel: torchrun (torch.distributed.run:main); upstream's known "
        "faults, as recorded: "
    )
    assert "torchfrtrace (tools.flight_recorder.fr_trace is not in the wheel)" in scripts["message"]


@pytest.mark.slow
def test_repaired_wheel_ships_the_vc_runtime_and_keeps_torch_dll_names(win_run: Run) -> None:
    wheel = win_run.repaired
    assert wheel.name == "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl"
    report = pe.check_wheel(wheel, python="3.11")
    assert report.ok, report.summary()
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        c10_user = pe.read_pe(archive.read("torch/lib/torch_cpu.dll"), "torch/lib/torch_cpu.dll")
    assert {"torch.libs/msvcp140.dll", "torch.libs/vcruntime140_1.dll"} <= names
    assert {"torch/lib/c10.dll", "torch/lib/torch_cpu.dll", "torch/lib/libiomp5md.dll"} <= names
    assert "c10.dll" in c10_user.imports  # not renamed: extensions link c10.lib
    assert not any(Path(n).name.lower() in {"nvcuda.dll", "nvml.dll"} for n in names)
    assert "vendored msvcp140.dll" in win_run.output


@pytest.mark.slow
def test_conda_package_is_win_64_with_short_paths_and_solves(win_run: Run) -> None:
    checks = win_run.checks
    assert checks["TB301"]["status"] == "passed", checks["TB301"]["message"]
    assert "python 3.11." in checks["TB301"]["message"]
    assert checks["C1145"]["status"] == "passed"  # every PE file is AMD64
    assert checks["TB102"]["status"] == "passed"
    assert "characters installed" in checks["TB102"]["message"]
    from torchbuild.conda.checks.package import read_package

    pkg = read_package(next(win_run.stage_dir("conda").glob("*.conda")))
    # the package is site-packages plus the console scripts' launchers in Scripts/ (tests/integration/test_scripts.py)
    outside = {m.name for m in pkg.files() if not m.name.startswith("Lib/site-packages/")}
    assert outside == {"Scripts/convert-caffe2-to-onnx.exe", "Scripts/convert-onnx-to-caffe2.exe",
                       "Scripts/torchfrtrace.exe", "Scripts/torchrun.exe"}  # fmt: skip
    depends = pkg.index["depends"]
    for name in ("vc14_runtime", "ucrt", "intel-openmp"):
        assert any(d.split()[0] == name for d in depends), depends
    assert "sympy >=1.13.1,!=1.13.2" in depends


@pytest.mark.slow
def test_torch_2_5_1_sets_the_floor_14_29_and_the_package_leaves_the_runtimes_to_its_dependencies(
    win_run: Run,
) -> None:
    from torchbuild.conda.checks.package import read_package
    from torchbuild.wheel.repair_report import RepairReport

    report = RepairReport.read(win_run.stage_dir("repair") / "repair.json")
    assert report.vc_runtime_floor is not None and report.vc_runtime_floor.version == "14.29"
    assert sorted(Path(v.path).name for v in report.vendored) == ["msvcp140.dll", "vcruntime140_1.dll"]
    pkg = read_package(next(win_run.stage_dir("conda").glob("*.conda")))
    assert "vc14_runtime >=14.29" in pkg.index["depends"]
    dlls = {Path(m.name).name.lower() for m in pkg.files() if m.name.lower().endswith(".dll")}
    assert not {"msvcp140.dll", "vcruntime140_1.dll", "libiomp5md.dll"} & dlls
    assert all(win_run.checks[code]["status"] == "passed" for code in ("TB105", "TB106", "TB107"))


# --- bad input -------------------------------------------------------------------------------------------


# --- torchvision beside torch (issue 28) -----------------------------------------------------------------------

VISION = "torchvision-0.20.1-cp311-cp311-win_amd64.whl"
VISION_CONDA = "torchvision-0.20.1-py3.11_cpu_0.conda"
PIN = "pytorch 2.5.1 py3.11_cpu_0"


@pytest.mark.slow
def test_torchvision_is_repaired_beside_torch_without_its_dlls(win_run: Run) -> None:
    """PyPI's torchvision 0.20.1 (the pair of torch 2.5.1): torch's DLLs are left to torch, the VC runtime is vendored
    at the floor torchvision's own binaries set (MSVC 14.38, above torch's 14.29), the image DLLs it bundles are
    listed in its repair report and SBOM."""
    out = win_run.output
    paired = f"torchvision 0.20.1: paired (requires torch==2.5.1; PyPI's {VISION})"
    assert f"{paired}, the stages build {VISION_CONDA}, which requires {PIN}" in out
    assert "beside it torchvision-0.20.1-cp311-cp311-win_amd64.whl (1.6 MB, sha256 as torchbuild/data/" in out
    with zipfile.ZipFile(win_run.stage_dir("repair") / VISION) as archive:
        names = set(archive.namelist())
    assert {"torchvision.libs/msvcp140.dll", "torchvision.libs/vcruntime140_1.dll", "torchvision/_C.pyd"} <= names
    with zipfile.ZipFile(win_run.repaired) as archive:
        torch_dlls = {Path(n).name.lower() for n in archive.namelist() if n.endswith(".dll")}
    vendored = {Path(n).name.lower() for n in names if n.endswith(".dll")}
    assert vendored & torch_dlls == {"msvcp140.dll", "vcruntime140_1.dll"}  # c10.dll, torch_cpu.dll: torch's
    report = json.loads((win_run.stage_dir("repair") / "repair-torchvision.json").read_text())
    assert report["vc_runtime_floor"]["version"] == "14.38"
    bundled = {Path(v["path"]).name for v in report["vendored"] if v["provider"] == "upstream wheel"}
    assert bundled == {"libpng16.dll", "jpeg8.dll", "libjpeg.dll", "libwebp.dll", "libsharpyuv.dll", "zlib.dll"}
    assert "11 DLLs of torch's wheel left to torch; bundled by PyPI's wheel" in out


@pytest.mark.slow
def test_torchvision_package_pins_the_exact_pytorch_build_and_solves_with_it(win_run: Run) -> None:
    from torchbuild.conda.checks.package import read_package

    pkg = read_package(win_run.stage_dir("conda") / "torchvision" / VISION_CONDA)
    assert (pkg.index["name"], pkg.index["version"], pkg.index["build"]) == ("torchvision", "0.20.1", "py3.11_cpu_0")
    assert pkg.index["depends"] == [
        "python >=3.11,<3.12.0a0", PIN, "numpy", "pillow >=5.3.0,!=8.3.*", "vc14_runtime >=14.38"
    ]
    files = {m.name for m in pkg.files()}
    assert "Lib/site-packages/torchvision/_C.pyd" in files and "Lib/site-packages/torchvision/libpng16.dll" in files
    assert not any(n.endswith(("msvcp140.dll", "vcruntime140_1.dll")) for n in files)  # vc14_runtime's
    checks = {(c["code"], Path(c["file"]).name): c for c in json.loads(
        (win_run.stage_dir("verify") / "checks.json").read_text())}  # fmt: skip
    for code in ("TB111", "TB112", "TB102", "C1145"):
        assert checks[(code, VISION_CONDA)]["status"] == "passed", checks[(code, VISION_CONDA)]
    assert "from torch's package: c10.dll, torch_cpu.dll" in checks[("TB112", VISION_CONDA)]["message"]
    joint = checks[("TB302", "pytorch-2.5.1-py3.11_cpu_0.conda")]
    assert joint["status"] == "passed", joint["message"]
    assert joint["message"].startswith(
        "pytorch-2.5.1-py3.11_cpu_0 and torchvision-0.20.1-py3.11_cpu_0 from the new packages' channel"
    )
    openmp = checks[("TB114", "pytorch-2.5.1-py3.11_cpu_0.conda")]
    assert openmp["status"] == "passed" and openmp["message"].startswith(
        "import torch, torchvision: libiomp5md.dll (Intel's OpenMP) imported by torch (Lib/site-packages/torch/"
    ), openmp


@pytest.mark.slow
def test_torch_and_torchaudio_2_5_1_as_pypi_ships_them_load_two_openmp_runtimes(
    win_run: Run, tmp_path: Path
) -> None:
    """PyPI's torchaudio 2.5.1 (the pair of torch 2.5.1): alone, each wheel imports one OpenMP runtime; together,
    torch's libiomp5md.dll and torchaudio's vcomp140.dll are two in the process of `import torch, torchaudio`."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    audio = next(c for c in plan.companions if c.name == "torchaudio")
    assert audio.release is None and "would load two OpenMP runtimes into one process" in audio.reason
    assert f"{audio.line}" in win_run.output  # the run says why torchaudio is not shipped
    pinned = companions.load().release("torchaudio", "2.5.1").builds["win-64"].wheels["3.11"]
    wheel = downloads.pinned_wheel(
        "torchaudio==2.5.1", pinned.file, pinned.sha256, plan.pip_target, RunOptions().cache_dir, tmp_path / "pip.log",
        "torchbuild/data/companions.yaml",
    )  # fmt: skip
    torch, torchaudio = pe.check_wheel(win_run.repaired, python="3.11"), pe.check_wheel(wheel, python="3.11")
    assert torch.openmp_check().status == "passed" and torchaudio.openmp_check().status == "passed"
    problem, _line = joint_openmp({"torch": torch.openmp_runtimes(), "torchaudio": torchaudio.openmp_runtimes()})
    assert problem.startswith("import torch, torchaudio loads 2 OpenMP runtimes into one process: libiomp5md.dll")
    assert "vcomp140.dll (MSVC's vcomp) imported by torchaudio (torchaudio/lib/libtorchaudio.pyd)" in problem


@pytest.mark.slow
def test_one_publish_serves_pytorch_and_torchvision_to_rattler_and_to_uv(win_run: Run, tmp_path: Path) -> None:
    """The channel after the one publish: py-rattler solves `pytorch torchvision` against it plus the stored
    conda-forge repodata and installs both from it; uv resolves `torch torchvision` with the channel's PEP 503 pages
    as the first index (pip's --index-url; their other requirements from PyPI) to both of the channel's wheels."""
    channel = win_run.workspace / "channel"
    assert (channel / "win-64" / VISION_CONDA).is_file()
    assert (channel / "whl" / "simple" / "torchvision" / VISION).is_file()
    script = tmp_path / "install.py"
    script.write_text(WIN_INSTALL)
    prefix = tmp_path / "prefix"
    result = subprocess.run(
        [sys.executable, str(script), channel.as_uri(), (REPODATA / "conda-forge").as_uri(), str(prefix),
         "pytorch", "torchvision", "python 3.11.*"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{PIN} {channel.as_uri()}" in result.stdout
    assert f"torchvision 0.20.1 py3.11_cpu_0 {channel.as_uri()}" in result.stdout
    assert "installed pytorch, torchvision" in result.stdout
    assert (prefix / "Lib" / "site-packages" / "torchvision" / "_C.pyd").is_file()
    assert (prefix / "Lib" / "site-packages" / "torch" / "lib" / "torch_cpu.dll").is_file()

    requirements = tmp_path / "requirements.in"
    requirements.write_text("torch\ntorchvision\n")
    compiled = subprocess.run(
        ["uv", "pip", "compile", str(requirements), "--no-config", "--no-header", "--emit-index-annotation",
         "--index", (channel / "whl" / "simple").as_uri(), "--python-platform", "windows", "--python-version", "3.11"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    lines = compiled.stdout.splitlines()
    index = f"# from {(channel / 'whl' / 'simple').as_uri()}"
    for pinned in ("torch==2.5.1+cpu", "torchvision==0.20.1"):
        after = lines[lines.index(pinned) + 1 :]
        assert next(line.strip() for line in after if "# from" in line) == index, compiled.stdout


WIN_INSTALL = """
import asyncio, os, sys
from rattler import BuildString, GenericVirtualPackage, MatchSpec, PackageName, Platform, Version, install, solve

channel, conda_forge, prefix, *wanted = sys.argv[1:]

async def main():
    virtual = [GenericVirtualPackage(PackageName("__win"), Version("0"), BuildString("0"))]
    specs = [MatchSpec(s, strict=False) for s in wanted]
    records = await solve([channel, conda_forge], specs, platforms=["win-64", "noarch"], virtual_packages=virtual)
    for r in records:
        print(r.name.normalized, r.version, r.build, r.channel)
    # The stored conda-forge repodata has no package files: the packages of our channel are installed.
    ours = [r for r in records if r.channel.rstrip("/") == channel.rstrip("/")]
    await install(ours, target_prefix=prefix, show_progress=False, platform=Platform("win-64"))
    print("installed", ", ".join(sorted(r.name.normalized for r in ours)))

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # py-rattler can crash at interpreter exit (see torchbuild/conda/rattler_child.py)
"""


@pytest.mark.slow
def test_a_torch_without_the_dlls_torchvision_imports_stops_the_cell_in_repair(
    pe_fixtures: PeFixtures, tmp_path: Path
) -> None:
    """A small torch wheel (test DLLs, no c10.dll) with the default packages: PyPI's torchvision cannot load beside
    it, and the repair says so, naming what it lacks; nothing is published."""
    wheel = _small_wheel(tmp_path / "w", {"torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext})
    result = pipeline(tmp_path, "--wheel", str(wheel))
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "✗ repair" in out
    assert (
        f"{VISION} (torchvision 0.20.1) imports c10.dll, torch_cpu.dll (from torchvision/_C.pyd, torchvision/image.pyd)"
        ", which torch's repaired wheel does not hold" in out
    )
    assert not (tmp_path / "channel").exists()


def _small_wheel(directory: Path, files: dict[str, Path]) -> Path:
    return make_wheel(
        directory,
        "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl",
        {"torch/__init__.py": b"", **{rel: path.read_bytes() for rel, path in files.items()}},
    )


def _fails_untouched(workspace: Path, wheel: Path, with_wine: bool = False) -> str:
    channel = workspace / "channel"
    result = pipeline(workspace, "--wheel", str(wheel), *TORCH_ONLY, with_wine=with_wine)
    assert result.returncode == 1, result.stdout[-2000:]
    assert not channel.exists()
    return result.stdout + result.stderr


@pytest.mark.slow
def test_small_wheel_is_repaired(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    wheel = _small_wheel(tmp_path, {"torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext})
    result = pipeline(tmp_path, "--wheel", str(wheel), *TORCH_ONLY)
    assert result.returncode == 0, result.stdout[-3000:]
    repaired = next((tmp_path / "build" / CELL / "repair").glob("*.whl"))
    with zipfile.ZipFile(repaired) as archive:
        assert {"torch.libs/msvcp140.dll", "torch.libs/vcruntime140_1.dll"} <= set(archive.namelist())


@pytest.mark.slow
def test_a_wheel_whose_closure_cannot_be_completed(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    wheel = _small_wheel(tmp_path, {"torch/lib/user.dll": pe_fixtures.user, "torch/lib/base.dll": pe_fixtures.base})
    assert "nothere.dll" in _fails_untouched(tmp_path, wheel)


@pytest.mark.slow
def test_a_32_bit_dll_in_the_wheel(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    files = {"torch/lib/base.dll": pe_fixtures.base32, "torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext}
    wheel = _small_wheel(tmp_path, files)
    out = _fails_untouched(tmp_path, wheel)
    assert "torch/lib/base.dll is built for I386; the wheel's platform needs AMD64" in out


@pytest.mark.slow
def test_a_dll_that_does_not_load_under_wine_stops_the_cell_in_verify(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    files = {"torch/lib/old.dll": pe_fixtures.old, "torch/lib/newer.dll": pe_fixtures.newer,
             "torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext}  # fmt: skip
    out = _fails_untouched(tmp_path, _small_wheel(tmp_path / "w", files), with_wine=True)
    assert "✗ verify" in out
    assert (
        "TB205 " + str(tmp_path / "build" / CELL / "repair" / "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl")
        + ": every DLL and extension of the wheel loads (LoadLibraryExW): "
    ) in out
    assert "torch/lib/newer.dll: error 127 (The specified procedure could not be found): missing old.dll.bar" in out


@pytest.mark.slow
def test_an_extension_for_another_python(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    wheel = _small_wheel(tmp_path / "w", {"torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext310})
    assert "python310.dll" in _fails_untouched(tmp_path, wheel)


# --- a CUDA cell ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cuda_cell_vendors_the_cuda_runtime_from_its_provider_but_never_the_driver(
    pe_fixtures: PeFixtures, tmp_path: Path
) -> None:
    """PyPI has no CUDA win_amd64 torch wheel, so the CUDA path runs on a small wheel of real PE files: a DLL that
    imports cudart64_12.dll and the driver's nvcuda.dll, and an extension that imports MSVCP140.dll. What is
    vendored is derived from those imports: cudart from the nvidia-cuda-runtime-cu12 12.4 wheel, msvcp140.dll from
    msvc-runtime and, because that msvcp140.dll imports it, vcruntime140_1.dll; nvcuda.dll is left to the driver,
    and the closure is complete."""
    from torchbuild.results import Artifact
    from torchbuild.stages import Context
    from torchbuild.stages.repair import stage as repair
    from torchbuild.wheel.provenance import SourceInfo

    plan = torch_plan("win-64", "12.4", "3.11", "2.5.1")
    assert plan.windows is not None and "cudart64_12.dll" in plan.windows.redistributable_dlls
    files = {"torch/lib/torch_cuda.dll": pe_fixtures.cuda, "torch/_C.cp311-win_amd64.pyd": pe_fixtures.ext}
    wheel = make_wheel(
        tmp_path, plan.root.wheel, {"torch/__init__.py": b"", **{rel: path.read_bytes() for rel, path in files.items()}}
    )
    info = tmp_path / "source.json"
    SourceInfo("wheel", str(wheel), "", "", 1_700_000_000, "the test").write(info)
    inputs = {"built_wheel": Artifact.of(wheel), "source_info": Artifact.of(info)}
    ctx = Context(plan=plan, root=tmp_path / "work", options=RunOptions(), inputs=inputs)
    result = repair.run(ctx)

    with zipfile.ZipFile(result.outputs["repaired_wheel"].path) as archive:
        names = {Path(n).name.lower() for n in archive.namelist()}
    assert {"cudart64_12.dll", "msvcp140.dll", "vcruntime140_1.dll"} <= names
    assert "nvcuda.dll" not in names
    assert "nvidia-cuda-runtime-cu12" in result.message or "nvidia_cuda_runtime_cu12" in result.message
    closure = {c.code: c for c in result.checks}["P100"]
    assert closure.status == "passed", closure.message
    assert "1 NVIDIA driver" in closure.message and "0 missing" in closure.message
