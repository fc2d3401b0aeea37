"""The smoke stages on the real torch 2.13.0 CPU wheel and a .conda made from it, in fresh environments."""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import datetime
import getpass
import io
import platform
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.builders import real_torch_wheel, record_hash, torch_plan
from tests.conftest import Scratch
from torchbuild.config.options import RunOptions
from torchbuild.config.user_tests import UserTest
from torchbuild.errors import StageFailed
from torchbuild.host import scratch, uv
from torchbuild.plan import Plan
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context, smoke_conda, smoke_wheel
from torchbuild.stages.smoke import stage as smoke
from torchbuild.stages.smoke.resources import smoke_checks
from torchbuild.stages.smoke.stage import wheel_requirements

BROKEN_INIT = b'raise ImportError("DLL load failed while importing _C: The specified module could not be found.")\n'


def resolve(platform: str = "linux-64", python: str = "3.11") -> Plan:
    return torch_plan(platform=platform, python=python)


@pytest.fixture(scope="session")
def linux_plan() -> Plan:
    return resolve()


@pytest.fixture(scope="session")
def torch_wheel() -> Path:
    # The upstream manylinux wheel is already auditwheel-repaired: it stands in for the repair stage's output.
    return real_torch_wheel()


@pytest.fixture(scope="module")
def torch_conda(torch_wheel: Path, linux_plan: Plan, module_scratch: Scratch) -> Path:
    """The .conda of the cell, assembled from the wheel with py-rattler-build (what the conda stage does)."""
    from rattler_build import assemble_package

    work = module_scratch("conda-from-wheel")
    files = work / "files"
    with zipfile.ZipFile(torch_wheel) as archive:
        archive.extractall(files / linux_plan.conda.site_packages)
    depends = [*linux_plan.root.conda.depends]
    for line in wheel_requirements(torch_wheel):
        requirement = Requirement(line)
        depends.append(f"{requirement.name} {requirement.specifier}".strip())
    conda = linux_plan.root.conda
    output = assemble_package(
        name=conda.name,
        version=conda.version,
        target_platform=linux_plan.conda.subdir,
        build_string=conda.build_string,
        build_number=conda.build_number,
        output_dir=work / "out",
        files_dir=files,
        depends=depends,
        license="BSD-3-Clause",
        compression_level=1,
        detect_prefix=False,
        timestamp=datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc),
    )
    shutil.rmtree(files)
    path = Path(output.path)
    assert path.name == conda.filename
    return path


def context(plan: Plan, root: Path, wheel: Path | None, conda: Path | None) -> Context:
    inputs = {name: Artifact.of(path) for name, path in (("repaired_wheel", wheel), ("conda_package", conda))
              if path is not None}
    return Context(plan=plan, root=root, options=RunOptions(), inputs=inputs)


@pytest.fixture(scope="module")
def smoke_results(
    linux_plan: Plan, torch_wheel: Path, torch_conda: Path, module_scratch: Scratch
) -> tuple[dict[str, StageResult], Path]:
    """Both smoke stages, side by side as the runner runs them on this host."""
    root = module_scratch("smoke-root")
    ctx = context(linux_plan, root, torch_wheel, torch_conda)
    before = torch_unpacked_in_uvs_cache()
    left_in_temp = inductors_folder_in_temp()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        wheel, conda = pool.submit(smoke_wheel.run, ctx), pool.submit(smoke_conda.run, ctx)
        results = {"wheel": wheel.result(), "conda": conda.result()}
    # uv keeps for good what it unpacks into its own cache: the artifact goes beside its content's copy instead
    assert torch_unpacked_in_uvs_cache() == before, "the smoke left torch unpacked in uv's shared cache"
    # torch.compile's precompiled headers go to the environment's own temporary folder, and with it
    assert inductors_folder_in_temp() == left_in_temp, "the smoke left torch.compile's files in this host's temp"
    return results, root


def inductors_folder_in_temp() -> list[str]:
    """What the host's temporary folder holds of torch.compile's default folder (torch writes there whatever
    TORCHINDUCTOR_CACHE_DIR says)."""
    folder = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.is_dir() else []


def torch_unpacked_in_uvs_cache() -> set[str]:
    """The folders of uv's shared cache (the one ``uv cache dir`` names) that hold an unpacked torch."""
    shared = Path(subprocess.run([uv.binary(), "cache", "dir"], capture_output=True, text=True, check=True).stdout
                  .strip())  # fmt: skip
    archives = shared / "archive-v0"
    if not archives.is_dir():
        return set()
    return {entry.name for entry in archives.iterdir() if any(entry.glob("torch-*.dist-info"))}


@pytest.mark.slow
def test_smoke_passes_on_the_real_wheel_and_conda_package(
    smoke_results: tuple[dict[str, StageResult], Path], linux_plan: Plan, torch_conda: Path
) -> None:
    results, root = smoke_results
    gpu_skip = "skipped (CPU build; a GPU is present)" if smoke_checks.gpu_present() else "skipped (no GPU)"
    where = f"on this linux-64 host (Python {platform.python_version()})"
    # torch.compile and the C++ consumer need a C++ compiler (and cmake): each says so where there is none
    compiler = any(shutil.which(c) for c in ("g++", "c++", "clang++"))
    host_skips = {"cuda matmul", "cuda runtime", *(() if compiler else ("torch.compile", "c++ consumer"))}
    if compiler and not shutil.which("cmake"):
        host_skips.add("c++ consumer")
    messages = {}
    for env, described in (("wheel", "a fresh venv"), ("conda", "a fresh conda prefix")):
        result = results[env]
        statuses = {c.name: c.status for c in result.checks}
        expected = {f"{env}: install": "passed"}
        for name in smoke_checks.check_names():  # torch's: no companion is built on linux-64
            expected[f"{env}: {name}"] = "skipped" if name in host_skips else "passed"
        assert statuses == expected, [c.to_dict() for c in result.checks if c.status != expected.get(c.name)]
        assert result.status == "passed"
        ran = len(smoke_checks.check_names())
        passed = ran - len(host_skips)
        assert result.message.startswith(f"{passed}/{ran} checks passed {where} in {described}; skipped: ")
        assert f"{env}: cuda matmul ({gpu_skip.removeprefix('skipped (')}" in result.message
        assert result.ran_on == where
        messages.update({c.name: c.message for c in result.checks})
    assert messages["wheel: cuda matmul"] == gpu_skip
    assert messages["conda: cuda matmul"] == gpu_skip
    assert messages["wheel: cuda runtime"] == messages["conda: cuda runtime"] == "skipped (CPU build)"
    for env in ("wheel", "conda"):
        assert messages[f"{env}: build config"].startswith("torch.__config__.show(): MKL on, OpenMP on, oneDNN on; ")
        assert "\nPyTorch built with:\n" in messages[f"{env}: build config"], "the whole text is in the report"
        assert "worst relative error" in messages[f"{env}: conv2d"]
        if "c++ consumer" not in host_skips:
            assert "find_package(Torch)" in messages[f"{env}: c++ consumer"]
        said = messages[f"{env}: console scripts"]  # 2.13.0 declares torchfrtrace and torchrun
        assert said.startswith("2 of 2 console scripts load their entry point: ") and "torchrun" in said, said
    assert messages["conda: dist-info"].startswith("torch 2.13.0+cpu (installer: ")
    if "torch.compile" not in host_skips:  # one content, compiled by one of the two (or a run before): never by both
        compiled = [messages[f"{env}: torch.compile"] for env in ("wheel", "conda")]
        said = "torch.compile(sin(x) + cos(x)) matches eager for float32, float64 with "
        assert all(m.startswith(said) for m in compiled), compiled
        assert any("; checked in an environment of the same content at " in m for m in compiled), compiled
    assert "98 License-File fields" in messages["wheel: dist-info"]
    # torch came from each environment itself, not from the host or the working directory
    assert "/smoke-wheel/wheel/venv/lib/python3.11/site-packages/torch/__init__.py" in messages["wheel: import"]
    # the conda prefix is made in memory where /dev/shm has room for it (rattler extracts the package there)
    conda_root = root / linux_plan.stage_dirs["smoke-conda"] / "conda"
    if scratch.in_memory(torch_conda.stat().st_size * smoke.UNPACKED_PER_PACKED) is not None:
        conda_root = Path(messages["conda: import"].split(" from ")[1].split("/venv/")[0])
        assert conda_root.parent == scratch.RAM_DIR and conda_root.name.startswith("torchbuild-smoke-conda-")
    assert f"{conda_root}/venv/lib/python3.11/site-packages/torch/__init__.py" in messages["conda: import"]
    assert not conda_root.exists()
    assert not (root / linux_plan.stage_dirs["smoke-conda"] / smoke.KEPT).exists()
    assert "torch 2.13.0+cpu (CUDA none" in messages["conda: import"]
    # the conda environment's torch is the conda package's (its conda-meta record and the file's sha256)
    record = f"conda-meta/{linux_plan.root.conda.name}-2.13.0-py3.11_cpu_0.json"
    assert record in messages["conda: install"]
    assert "torch/__init__.py sha256 matches" in messages["conda: install"]
    assert (
        "conda-only dependencies not installed: python >=3.11,<3.12.0a0, _openmp_mutex >=4.5"
        in messages["conda: install"]
    )
    assert messages["wheel: install"].endswith(" s")
    assert "OpenMP available" in messages["wheel: openmp mkl"] and "MKL available" in messages["wheel: openmp mkl"]
    assert "103 items, each exactly once, from 2 spawned workers" in messages["conda: dataloader spawn"]
    # the environments are removed after success; the logs stay
    assert not (root / linux_plan.stage_dirs["smoke-wheel"] / "wheel").exists()
    assert not (root / linux_plan.stage_dirs["smoke-conda"] / "conda").exists()
    assert (root / linux_plan.stage_dirs["logs"] / "smoke-wheel.log").is_file()
    assert (root / linux_plan.stage_dirs["logs"] / "smoke-conda.log").is_file()


@pytest.fixture
def broken_wheel(torch_wheel: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of the real wheel whose torch/__init__.py raises the ImportError Windows users see; RECORD
    updated so that the wheel stays valid. Members are stored uncompressed: a rewrite at any deflate level
    takes longer than pip takes to install the result."""
    out = tmp_path / torch_wheel.name
    with zipfile.ZipFile(torch_wheel) as src, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "torch/__init__.py":
                data = BROKEN_INIT
            elif info.filename.endswith(".dist-info/RECORD"):
                rows = list(csv.reader(io.StringIO(data.decode())))
                rows = [
                    [p, record_hash(BROKEN_INIT), str(len(BROKEN_INIT))] if p == "torch/__init__.py" else [p, h, s]
                    for p, h, s in rows
                ]
                text = io.StringIO()
                csv.writer(text, lineterminator="\n").writerows(rows)
                data = text.getvalue().encode()
            dst.writestr(info.filename, data)
    yield out
    out.unlink()


@pytest.mark.slow
def test_a_broken_torch_fails_the_stage_naming_the_check(linux_plan: Plan, broken_wheel: Path, tmp_path: Path) -> None:
    with pytest.raises(StageFailed) as caught:
        smoke_wheel.run(context(linux_plan, tmp_path, broken_wheel, None))
    message = str(caught.value)
    first = message.splitlines()[0]
    assert first.startswith(
        "smoke-wheel: wheel: import failed in a fresh venv on this linux-64 host "
        f"(Python {platform.python_version()}) with {broken_wheel.name}: ImportError: DLL load failed while "
        "importing _C"
    ), message
    assert 'raise ImportError("DLL load failed' in message  # the check's output (the traceback)
    assert "also failed: wheel: cpu matmul" in message
    env_root = tmp_path / linux_plan.stage_dirs["smoke-wheel"] / "wheel"
    assert f"The environment is kept for debugging: {env_root}" in message
    assert (env_root / "venv" / "bin" / "python").exists()
    statuses = {c.name: c.status for c in caught.value.checks}
    assert statuses["wheel: install"] == "passed"
    assert statuses["wheel: import"] == "failed"
    # no check that imports torch passes, and the GPU check is not "skipped" when torch cannot even be imported;
    # the C++ consumer (linked to libtorch), the dist-info check (files and metadata) and, on a CPU cell, the CUDA
    # runtime check (said from the Plan) do not import it
    without_import = {"wheel: install", "wheel: c++ consumer", "wheel: dist-info", "wheel: cuda runtime"}
    assert {s for n, s in statuses.items() if n not in without_import} == {"failed"}
    assert statuses["wheel: dist-info"] == "passed"
    assert statuses["wheel: cuda runtime"] == "skipped"
    assert set(statuses) == {"wheel: install", *(f"wheel: {name}" for name in smoke_checks.check_names())}


def test_missing_inputs_name_the_valid_ones(linux_plan: Plan, torch_wheel: Path, tmp_path: Path) -> None:
    with pytest.raises(StageFailed) as caught:
        smoke_wheel.run(context(linux_plan, tmp_path, None, None))
    assert str(caught.value) == "smoke-wheel: needs the input repaired_wheel; missing: repaired_wheel; given: none"
    with pytest.raises(StageFailed) as caught:
        smoke_conda.run(context(linux_plan, tmp_path, torch_wheel, None))
    assert str(caught.value) == (
        "smoke-conda: needs the inputs conda_package and repaired_wheel; missing: conda_package; given: repaired_wheel"
    )


FAILING_TEST = 'python -c "import sys, torch; print(\'the users test saw torch\', torch.__version__); sys.exit(5)"'


@pytest.mark.slow
def test_a_failing_test_command_fails_both_stages_with_its_output(
    linux_plan: Plan, torch_wheel: Path, torch_conda: Path, tmp_path: Path
) -> None:
    test = UserTest(command=FAILING_TEST, requires=(), project=str(tmp_path))
    ctx = context(dataclasses.replace(linux_plan, user_test=test), tmp_path, torch_wheel, torch_conda)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = {"wheel": pool.submit(smoke_wheel.run, ctx), "conda": pool.submit(smoke_conda.run, ctx)}
        for env, future in runs.items():
            with pytest.raises(StageFailed) as caught:
                future.result()
            message = str(caught.value)
            assert message.startswith(f"smoke-{env}: {env}: test_command failed in "), message
            assert "failed (exit 5); the output (its last 40 lines):" in message
            assert "the users test saw torch 2.13.0+cpu" in message
            statuses = {c.name: c.status for c in caught.value.checks}
            assert statuses[f"{env}: test_command"] == "failed"
            assert [n for n, s in statuses.items() if s == "failed"] == [f"{env}: test_command"]


@pytest.mark.slow
def test_a_passing_test_command_is_listed(linux_plan: Plan, torch_wheel: Path, tmp_path: Path) -> None:
    test = UserTest(command='python -c "import torch; torch.ones(2)"', requires=(), project=str(tmp_path))
    result = smoke_wheel.run(context(dataclasses.replace(linux_plan, user_test=test), tmp_path, torch_wheel, None))
    listed = {c.name: c for c in result.checks}["wheel: test_command"]
    assert listed.status == "passed" and listed.code == "TB401" and listed.duration is not None
    assert listed.message.startswith('python -c "import torch; torch.ones(2)": 1 command passed in ')
