"""Windows CUDA with NVIDIA's real DLLs, on the Windows CUDA FIXTURE wheel (tests/cuda_win_fixture.py): no CUDA torch
wheel for Windows is reachable here, so a small torch-like wheel built with mingw-w64 stands in for one. Its DLLs
import the real CUDA 12.8 and 13.0 names (cudart64_12.dll / nvrtc64_120_0.dll, cudart64_13.dll / nvrtc64_130_0.dll);
the DLLs it gets are NVIDIA's, from PyPI's nvidia-* win_amd64 wheels. The repair stage's real code path (delvewheel
through windows.py) repairs it both ways:

- left to the requirements: the wheel declares nvidia-cuda-runtime(-cu12) and nvidia-cuda-nvrtc(-cu12), the Plan's
  declared_libraries hold those wheels, delvewheel excludes their DLLs and the repair says which requirement
  provides which DLL; under Wine the nvidia wheels are installed beside it (resolved for Windows by uv) and the
  fixture adds their ``nvidia\\...\\bin`` folders with os.add_dll_directory, as upstream's wheels do;
- vendored: the same DLLs copied unmangled into torch.libs, byte-identical to the nvidia wheels' files, so that
  NVIDIA's Authenticode signature (CUDA 13's DLLs carry one; the -cu12 wheels' carry none, which the data says) is
  intact and verifies offline (signify).

Both load under Wine with python.org's embeddable CPython: the loader check (verify's TB205) and python.exe calling
cudaRuntimeGetVersion and nvrtcVersion through the fixture's DLLs. And the left shape without one of its requirements
fails, naming the DLL, its importer and the requirement.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pefile
import pytest

from tests.builders import torch_plan
from tests.conftest import Scratch
from tests.cuda_win_fixture import VARIANTS, CudaVariant, NvidiaWheel, build_wheel, probe_script
from torchbuild.config.options import RunOptions
from torchbuild.host import downloads, pip
from torchbuild.plan import Plan
from torchbuild.platforms.windows import authenticode, dependencies, environments, python_embed, wine
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.verify.loader import loader_checks
from torchbuild.wheel.provenance import SourceInfo

pytestmark = pytest.mark.slow  # the vendored repair packs ~95 MB of NVIDIA DLLs (20-40 s each)

CACHE = RunOptions().cache_dir
SECURITY = 4  # IMAGE_DIRECTORY_ENTRY_SECURITY: where a PE file's Authenticode signature sits
CUDAS = sorted(VARIANTS)


@dataclasses.dataclass(frozen=True)
class Repaired:
    variant: CudaVariant
    plan: Plan
    result: StageResult

    @property
    def wheel(self) -> Path:
        return self.result.outputs["repaired_wheel"].path


def left_plan(variant: CudaVariant, wheels: Sequence[NvidiaWheel] | None = None) -> Plan:
    """The cell's win-64 Plan with the fixture's declared requirements as its declared_libraries."""
    plan = torch_plan("win-64", variant.cuda, "3.11", variant.torch)
    chosen = variant.wheels if wheels is None else wheels
    return dataclasses.replace(plan, declared_libraries=tuple(w.as_requirement() for w in chosen))


def repaired(variant: CudaVariant, shape: str, tmp: Path) -> Repaired:
    if shape == "left":
        plan, declare = left_plan(variant), None
    else:  # a self-contained wheel declares no nvidia-* requirement
        plan, declare = torch_plan("win-64", variant.cuda, "3.11", variant.torch), ()
    wheel = build_wheel(variant, tmp, plan.root.wheel, declare)
    info = tmp / "source.json"
    SourceInfo("wheel", str(wheel), "", "", 1_700_000_000, "the Windows CUDA fixture").write(info)
    inputs = {"built_wheel": Artifact.of(wheel), "source_info": Artifact.of(info)}
    return Repaired(
        variant, plan, repair.run(Context(plan=plan, root=tmp / "work", options=RunOptions(), inputs=inputs))
    )


@pytest.fixture(scope="module")
def left(module_scratch: Scratch) -> dict[str, Repaired]:
    return {cuda: repaired(VARIANTS[cuda], "left", module_scratch(f"left{cuda}")) for cuda in CUDAS}


@pytest.fixture(scope="module")
def vendored(module_scratch: Scratch) -> dict[str, Repaired]:
    return {cuda: repaired(VARIANTS[cuda], "vendored", module_scratch(f"vendored{cuda}")) for cuda in CUDAS}


def needs_wine() -> wine.Wine:
    found = wine.find()
    if found is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    return found


def nvidia_files(variant: CudaVariant, log: Path) -> dict[str, Path]:
    """DLL name -> the file in NVIDIA's wheel (fetched once by sha256 into the pipeline's cache)."""
    target = pip.target_args("3.11", None, ["win_amd64"])
    found = {}
    for wheel in variant.wheels:
        root = downloads.requirement_libraries(wheel.as_requirement(), target, CACHE, log)
        found.update({PurePosixPath(m).name: root / m for m in wheel.dlls})
    return found


def probe(found: wine.Wine, made: Repaired, tmp: Path, requirements: Sequence[str] | None = None) -> wine.Ran:
    """python.exe (python.org's embeddable CPython 3.11) under Wine, in a fresh environment holding the repaired
    wheel and, for the left shape, the win_amd64 wheels of its requirements (uv resolves them for Windows);
    ``requirements``: install only those projects of them."""
    plan = made.plan
    assert plan.windows is not None and plan.windows.embeddable is not None
    embedded = python_embed.provision(plan.windows.embeddable, CACHE, show_progress=False)
    root = tmp / "env"
    environments.python_env(embedded, root)
    dependencies.install(made.wheel, root, plan.conda.install_scheme)
    roots = [(line, "the fixture") for line in dependencies.metadata_requires(made.wheel)]
    if roots:
        dest = CACHE / "win-wheels" / "py3.11"
        resolved = dependencies.resolve(roots, python=embedded.pinned.cpython, dest=dest, log=tmp / "uv.log")
        for dep in resolved:
            if requirements is None or dep.name in requirements:
                dependencies.install(dep.wheel, root, plan.conda.install_scheme)
    script = tmp / "probe.py"
    script.write_text(probe_script(made.variant), encoding="utf-8")
    with wine.Session(found, wine.fresh_prefix(found, CACHE, tmp / "prefix")) as session:
        return session.run([root / "python.exe", wine.windows_path(script)], timeout=300)


def runtime_answer(variant: CudaVariant) -> str:
    """cudaRuntimeGetVersion without a driver: CUDA 12.8's cudart answers its version; CUDA 13's asks for the driver
    first (Wine's loader: nvcuda.dll not found) and answers 801, cudaErrorNotSupported."""
    return f"0 {variant.runtime_version}" if variant.cuda == "12.8" else "801 0"


@pytest.mark.parametrize("cuda", CUDAS)
def test_left_to_the_requirements_names_which_requirement_provides_each_dll(
    left: dict[str, Repaired], cuda: str
) -> None:
    made = left[cuda]
    v = made.variant
    runtime, nvrtc = v.runtime, v.nvrtc_wheel
    assert made.result.message.startswith(
        f"delvewheel --ignore-existing --no-mangle-all: vendored nothing into {made.plan.root.wheel}"
    ), made.result.message
    assert (
        f"left to the declared requirements: {v.nvrtc} from {nvrtc.name}=={nvrtc.version} ({nvrtc.file}); "
        f"{v.cudart} from {runtime.name}=={runtime.version} ({runtime.file})"
    ) in made.result.message
    closure = {c.code: c for c in made.result.checks}["P100"]
    assert closure.status == "passed" and "2 from run dependencies, 0 missing" in closure.message
    with zipfile.ZipFile(made.wheel) as archive:
        names = sorted(archive.namelist())
        requires = archive.read(f"torch-{made.plan.root.wheel.split('-')[1]}.dist-info/METADATA").decode()
    assert not [n for n in names if n.startswith("torch.libs/")], names
    # The SBOM lists each requirement as a required dependency of the wheel, with its wheel's sha256.
    sbom = json.loads(
        zipfile.ZipFile(made.wheel).read(next(n for n in names if n.endswith("sboms/torchbuild.cdx.json")))
    )
    required = {
        c["purl"].split("?")[0]: c["hashes"][0]["content"] for c in sbom["components"] if c["scope"] == "required"
    }
    assert required == {f"pkg:pypi/{w.name}@{w.version}": w.sha256 for w in v.wheels}
    assert f'Requires-Dist: {runtime.name}=={runtime.version}; platform_system == "Windows"' in requires


@pytest.mark.parametrize("cuda", CUDAS)
def test_left_shape_loads_under_wine_with_nvidias_dlls_from_the_installed_requirements(
    left: dict[str, Repaired], cuda: str, tmp_path: Path
) -> None:
    found = needs_wine()
    made = left[cuda]
    v = made.variant
    (check,) = loader_checks(made.plan, made.wheel, None, tmp_path / "lc", CACHE, tmp_path / "loadcheck.log")
    bins = "nvidia\\cuda_runtime\\bin, nvidia\\cuda_nvrtc\\bin" if cuda == "12.8" else "nvidia\\cu13\\bin\\x86_64"
    assert check.status == "passed", check.message
    assert check.message.endswith(
        f"the DLLs of the declared requirements {v.runtime.name}=={v.runtime.version}, "
        f"{v.nvrtc_wheel.name}=={v.nvrtc_wheel.version} where pip installs them ({bins})"
    ), check.message
    ran = probe(found, made, tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.shown_stderr
    site = wine.windows_path(tmp_path / "env" / "Lib" / "site-packages")
    folders = dict(zip((v.cudart, v.nvrtc), bins.split(", ") if cuda == "12.8" else [bins, bins], strict=True))
    assert ran.stdout.splitlines() == [
        f"cudaRuntimeGetVersion {runtime_answer(v)}",
        f"nvrtcVersion 0 {v.nvrtc_version[0]} {v.nvrtc_version[1]}",
        *(f"loaded {dll} from {site}\\{folders[dll]}\\{dll}" for dll in (v.cudart, v.nvrtc)),
    ], ran.stdout


@pytest.mark.parametrize("cuda", CUDAS)
def test_vendored_dlls_are_nvidias_files_unmangled_with_their_signature_intact(
    vendored: dict[str, Repaired], cuda: str, tmp_path: Path
) -> None:
    made = vendored[cuda]
    v = made.variant
    assert made.result.message.startswith(
        f"delvewheel --ignore-existing --no-mangle-all: vendored {v.nvrtc} (wheel {v.nvrtc_wheel.file}), {v.cudart} "
        f"(wheel {v.runtime.file}), {v.builtins} (wheel {v.nvrtc_wheel.file}) into {made.plan.root.wheel}"
    ), made.result.message
    originals = nvidia_files(v, tmp_path / "fetch.log")
    with zipfile.ZipFile(made.wheel) as archive:
        libs = {PurePosixPath(n).name: archive.read(n) for n in archive.namelist() if n.startswith("torch.libs/")}
        imports = archive.read("torch/lib/torch_cuda.dll")
    assert sorted(libs) == sorted([v.cudart, v.nvrtc, v.builtins])
    report = json.loads(made.result.outputs["repair_report"].path.read_text())
    signers = {PurePosixPath(e["path"]).name: e["signer"] for e in report["vendored"]}
    expected = "NVIDIA Corporation (NVIDIA Corporation; root DigiCert Trusted Root G4)"
    if cuda == "12.8":
        expected = "not signed (NVIDIA's -cu11/-cu12 wheels carry these DLLs without an embedded signature"
    assert all(signer.startswith(expected) for signer in signers.values()) and len(signers) == 3, signers
    assert v.cudart.encode() in imports  # the import table still names NVIDIA's file: nothing was renamed
    for name, data in libs.items():
        original = originals[name].read_bytes()
        assert hashlib.sha256(data).hexdigest() == hashlib.sha256(original).hexdigest(), name
        copy = tmp_path / name
        copy.write_bytes(data)
        security = pefile.PE(str(copy), fast_load=True).OPTIONAL_HEADER.DATA_DIRECTORY[SECURITY]
        if cuda == "12.8":  # NVIDIA's -cu12 wheels ship these unsigned; dll_providers.yaml `unsigned` says so
            assert (security.VirtualAddress, security.Size) == (0, 0), name
            with pytest.raises(authenticode.NotSigned):
                authenticode.verify(copy)
        else:
            assert security.Size > 0 and data[security.VirtualAddress :] == original[security.VirtualAddress :]
            assert authenticode.check_vendor(copy, "NVIDIA Corporation").organization == "NVIDIA Corporation"


@pytest.mark.parametrize("cuda", CUDAS)
def test_vendored_shape_loads_under_wine_from_its_libs_dir(
    vendored: dict[str, Repaired], cuda: str, tmp_path: Path
) -> None:
    found = needs_wine()
    made = vendored[cuda]
    v = made.variant
    (check,) = loader_checks(made.plan, made.wheel, None, tmp_path / "lc", CACHE, tmp_path / "loadcheck.log")
    assert check.status == "passed", check.message
    assert check.message.startswith("5 files loaded under Wine"), check.message
    ran = probe(found, made, tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.shown_stderr
    libs = wine.windows_path(tmp_path / "env" / "Lib" / "site-packages" / "torch.libs")
    assert ran.stdout.splitlines() == [
        f"cudaRuntimeGetVersion {runtime_answer(v)}",
        f"nvrtcVersion 0 {v.nvrtc_version[0]} {v.nvrtc_version[1]}",
        f"loaded {v.cudart} from {libs}\\{v.cudart}",
        f"loaded {v.nvrtc} from {libs}\\{v.nvrtc}",
    ], ran.stdout


def test_left_shape_without_one_requirement_fails_naming_the_dll_its_importer_and_the_requirement(
    left: dict[str, Repaired], tmp_path: Path
) -> None:
    """CUDA 12.8's left wheel where only nvidia-cuda-runtime-cu12 is installed (the NVRTC requirement is not)."""
    found = needs_wine()
    made = left["12.8"]
    v = made.variant
    plan = left_plan(v, [v.runtime])
    (check,) = loader_checks(plan, made.wheel, None, tmp_path / "lc", CACHE, tmp_path / "loadcheck.log")
    assert check.status == "failed"
    assert check.message == (
        "torch/lib/caffe2_nvrtc.dll: error 126 (The specified module could not be found): missing nvrtc64_120_0.dll "
        "(needed by torch/lib/caffe2_nvrtc.dll); nvrtc64_120_0.dll is installed by nvidia-cuda-nvrtc-cu12==12.8.* "
        "(dll_providers.yaml), which is not among the requirements (nvidia-cuda-runtime-cu12==12.8.90)"
    )
    ran = probe(found, dataclasses.replace(made, plan=plan), tmp_path, requirements=[v.runtime.name])
    assert ran.returncode != 0
    assert "FileNotFoundError: Could not find module" in ran.stderr and "caffe2_nvrtc.dll" in ran.stderr
    problems = [p.describe(tmp_path / "env") for p in wine.loader_problems(ran.stderr)]
    assert "nvrtc64_120_0.dll (needed by Lib/site-packages/torch/lib/caffe2_nvrtc.dll) not found" in problems
