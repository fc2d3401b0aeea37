"""The build stage compiling real projects: the same code path a PyTorch checkout takes (source stage -> toolchain
activation -> the Plan's environment -> pip wheel -> build.log), on small fixture projects, because no PyTorch
compile fits on these machines.

The fixtures are not PyTorch checkouts, and say so: ``RunOptions.source_kind="project"`` skips the one step that
checks for a PyTorch checkout (and the wheel-name check against the Plan); everything else is the real path.
The CUDA Plans' arch list is shortened to "7.5;8.6+PTX" (and cuDNN off) to keep the compile small; the fixture's
device code is then checked with cuobjdump from a CUDA toolkit (the provisioned 13.2 one: this machine's 13.0
install has no cuobjdump)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.test_provision import provisioned_toolkit
from torchbuild import plan as plan_mod
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed, UserError
from torchbuild.host import checkout
from torchbuild.plan import Plan
from torchbuild.results import StageResult
from torchbuild.stages import Context, source
from torchbuild.stages.build import stage as build

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ARCHS = "7.5;8.6+PTX"


def cell_plan(cuda: str, torch: str = "latest") -> Plan:
    m = matrix.load(ROOT / "matrix.yaml")
    plan = plan_mod.resolve(Cell(platform="linux-64", cuda=cuda, python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                                 torch=torch), m)
    env = {**plan.env, "MAX_JOBS": "2"}
    if not plan.is_cuda:
        return dataclasses.replace(plan, env=env)
    env.update(TORCH_CUDA_ARCH_LIST=ARCHS, USE_CUDNN="0")
    return dataclasses.replace(plan, env=env, cudnn=None)  # the fixture needs no cuDNN


def build_fixture(plan: Plan, src: Path, work: Path, cache: Path) -> tuple[StageResult, Path]:
    options = RunOptions(source_dir=src, source_kind="project", cache_dir=cache)
    got = source.run(Context(plan=plan, root=work, options=options))
    result = build.run(Context(plan=plan, root=work, options=options, inputs=got.outputs))
    return result, work / plan.work_dir / "build.log"


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest)
    return dest


def run_python(site: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=site, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def device_code(cuobjdump: Path, library: Path) -> tuple[set[str], set[str]]:
    listing = subprocess.run([str(cuobjdump), "--list-elf", "--list-ptx", str(library)], capture_output=True,
                             text=True, check=False)
    text = listing.stdout + listing.stderr
    elf = set(re.findall(r"ELF file\s+\d+: .*\.(sm_\w+)\.cubin", text))
    ptx = set(re.findall(r"PTX file\s+\d+: .*\.(sm_\w+)\.ptx", text))
    return elf, ptx


def no_nvcc_13() -> bool:
    return not Path("/usr/local/cuda-13.0/bin/nvcc").is_file()


@pytest.mark.slow
@pytest.mark.skipif(no_nvcc_13(), reason="skipped: needs the CUDA 13.0 toolkit at /usr/local/cuda-13.0")
def test_cuda_fixture_has_device_code_for_exactly_the_plans_archs(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    plan = cell_plan("13.0")
    src = Path(shutil.copytree(FIXTURES / "cuda_ext", tmp_path / "src"))
    result, log = build_fixture(plan, src, tmp_path / "work", tmp_path / "cache")
    wheel = result.outputs["built_wheel"].path
    assert wheel.name.startswith("fixture_ext-0.1.0-cp3") and result.outputs["build_log"].path == log
    site = unpack(wheel, tmp_path / "site")
    seen = json.loads((site / "fixture_ext" / "_build_env.json").read_text())
    assert seen["USE_CUDA"] == "1" and seen["TORCH_CUDA_ARCH_LIST"] == ARCHS
    assert seen["CMAKE_GENERATOR"] == "Ninja" and seen["MAX_JOBS"] == "2"
    assert seen["PYTORCH_BUILD_VERSION"] == plan.version and seen["CUDA_HOME"] == "/usr/local/cuda-13.0"
    text = log.read_text()
    assert "-gencode=arch=compute_75,code=sm_75" in text and "-gencode=arch=compute_86,code=compute_86" in text
    assert "# environment (the Plan's, as applied)" in text and "[exit 0 after" in text
    library = next((site / "fixture_ext").glob("_ext*.so"))
    cuobjdump = provisioned_toolkit(request) / "bin" / "cuobjdump"
    elf, ptx = device_code(cuobjdump, library)
    assert (elf, ptx) == ({"sm_75", "sm_86"}, {"sm_86"})  # exactly the Plan's list: 7.5, 8.6 and 8.6's PTX
    out = run_python(site, "import fixture_ext as f; print(f.add(2, 3), f.cuda_built(), f.scale([1.0, 2.5], 2.0))")
    assert out.startswith("5 True (")
    if shutil.which("nvidia-smi") is None:
        # no GPU here: the kernel cannot run, and the CUDA runtime says why (recorded in the closing note)
        assert "'ok'" not in out
        pytest.skip(f"skipped: no GPU on this machine; the kernel's launch reported {out.split('(', 1)[1][:80]!r}")
    assert out.endswith("('ok', [2.0, 5.0])")


@pytest.mark.slow
def test_cpu_plan_builds_without_device_code(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    plan = cell_plan("cpu")
    src = Path(shutil.copytree(FIXTURES / "cuda_ext", tmp_path / "src"))
    result, _log = build_fixture(plan, src, tmp_path / "work", tmp_path / "cache")
    site = unpack(result.outputs["built_wheel"].path, tmp_path / "site")
    seen = json.loads((site / "fixture_ext" / "_build_env.json").read_text())
    assert seen["USE_CUDA"] == "0" and seen["NO_CUDA"] == "1" and seen["TORCH_CUDA_ARCH_LIST"] is None
    assert run_python(site, "import fixture_ext as f; print(f.add(40, 2), f.cuda_built())") == "42 False"
    library = next((site / "fixture_ext").glob("_ext*.so"))
    assert device_code(provisioned_toolkit(request) / "bin" / "cuobjdump", library) == (set(), set())


@pytest.mark.slow
def test_a_fixture_that_fails_to_compile_names_its_error_line(tmp_path: Path) -> None:
    plan = cell_plan("cpu")
    src = Path(shutil.copytree(FIXTURES / "cuda_ext", tmp_path / "src"))
    ext = src / "src" / "ext.cpp"
    ext.write_text(ext.read_text() + "\nstatic int broken() { return undeclared_symbol + 1; }\n")
    line = len(ext.read_text().splitlines())
    with pytest.raises(StageFailed) as err:
        build_fixture(plan, src, tmp_path / "work", tmp_path / "cache")
    message = str(err.value)
    log = tmp_path / "work" / plan.work_dir / "build.log"
    assert message.startswith("build: the build (pip-wheel) failed (exit 1) after")
    assert re.search(rf"First error: {re.escape(str(ext))}:{line}:\d+: error: .undeclared_symbol. was not declared",
                     message), message
    assert "Last 30 lines:" in message and message.endswith(f"Full log: {log}")
    assert "undeclared_symbol" in log.read_text()


def test_source_dir_that_is_not_a_pytorch_checkout(tmp_path: Path) -> None:
    plan = cell_plan("cpu", torch="2.5.1")
    options = RunOptions(source_dir=FIXTURES / "cuda_ext", cache_dir=tmp_path)  # source_kind defaults to pytorch
    with pytest.raises(UserError) as err:
        source.run(Context(plan=plan, root=tmp_path, options=options))
    assert "is not a PyTorch checkout (no version.txt, torch/__init__.py, aten/src/ATen, c10)" in str(err.value)
    assert "--git-ref v2.5.1" in str(err.value)


def test_pytorch_checkout_checks(tmp_path: Path) -> None:
    fake = tmp_path / "pytorch"  # a fake: the marker files of a PyTorch checkout, nothing to compile
    for marker in ("aten/src/ATen", "c10", "torch", "third_party/fmt"):
        (fake / marker).mkdir(parents=True)
    (fake / "setup.py").write_text("")
    (fake / "torch" / "__init__.py").write_text("")
    (fake / "version.txt").write_text("2.6.0a0\n")
    with pytest.raises(UserError, match=r"submodules are not checked out \(third_party/pybind11/include missing\)"):
        checkout.validate_pytorch(fake, "2.5.1")
    (fake / "third_party" / "pybind11" / "include").mkdir(parents=True)
    with pytest.raises(UserError, match=r"is PyTorch 2.6.0a0 \(version.txt\), but this cell builds torch 2.5.1"):
        checkout.validate_pytorch(fake, "2.5.1")
    assert checkout.validate_pytorch(fake, "2.6.0") == "2.6.0a0"


def test_an_edit_changes_the_source_stage_output(tmp_path: Path) -> None:
    plan = cell_plan("cpu")
    src = Path(shutil.copytree(FIXTURES / "cuda_ext", tmp_path / "src"))
    options = RunOptions(source_dir=src, source_kind="project", cache_dir=tmp_path / "cache")
    first = source.run(Context(plan=plan, root=tmp_path, options=options)).outputs["checkout"].sha256
    again = source.run(Context(plan=plan, root=tmp_path, options=options)).outputs["checkout"].sha256
    (src / "src" / "ext.cpp").write_text("// edited\n")
    edited = source.run(Context(plan=plan, root=tmp_path, options=options)).outputs["checkout"].sha256
    assert first == again != edited  # the build's input key follows the checkout's content


def test_git_ref_clone_failure_is_clear(tmp_path: Path) -> None:
    options = RunOptions(git_ref="v0.0.0-no-such-tag", git_url=str(tmp_path / "no-repo"), cache_dir=tmp_path)
    with pytest.raises(UserError) as err:
        source.run(Context(plan=cell_plan("cpu"), root=tmp_path, options=options))
    message = str(err.value)
    assert "`git fetch --depth 1 --no-recurse-submodules origin v0.0.0-no-such-tag`" in message
    assert f"--git-url {tmp_path / 'no-repo'} --git-ref v0.0.0-no-such-tag" in message and "Full log:" in message


def test_git_ref_clones_with_submodules(tmp_path: Path) -> None:
    """A real clone (of local repositories: no network here) with a submodule, through the source stage."""
    def git(cwd: Path, *args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always", *args],
                       cwd=cwd, check=True, capture_output=True)

    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "CMakeLists.txt").write_text("# sub\n")
    git(sub, "init", "-q")
    git(sub, "add", ".")
    git(sub, "commit", "-qm", "sub")
    main = Path(shutil.copytree(FIXTURES / "cuda_ext", tmp_path / "main"))
    git(main, "init", "-q")
    git(main, "-c", "protocol.file.allow=always", "submodule", "add", str(sub), "third_party/sub")
    git(main, "add", ".")
    git(main, "commit", "-qm", "main")
    git(main, "tag", "v9.9.9")
    options = RunOptions(git_ref="v9.9.9", git_url=str(main), source_kind="project", cache_dir=tmp_path / "cache")
    env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.file.allow", "GIT_CONFIG_VALUE_0": "always"}
    os.environ.update(env)
    try:
        result = source.run(Context(plan=cell_plan("cpu"), root=tmp_path, options=options))
    finally:
        for key in env:
            os.environ.pop(key)
    found = checkout.Checkout.read(result.outputs["checkout"].path)
    assert found.origin == f"{main}@v9.9.9" and len(found.commit) == 40
    assert (Path(found.path) / "third_party" / "sub" / "CMakeLists.txt").read_text() == "# sub\n"


@pytest.mark.slow
def test_torch_cpp_extension_through_the_build_stage(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="skipped: torch is not importable in this Python")
    plan = cell_plan("cpu")
    src = Path(shutil.copytree(FIXTURES / "torch_ext", tmp_path / "src"))
    result, log = build_fixture(plan, src, tmp_path / "work", tmp_path / "cache")
    site = unpack(result.outputs["built_wheel"].path, tmp_path / "site")
    code = "import torch, torch_ext_fixture as t; print(t.scaled_add(torch.ones(3), torch.arange(3.0), 2.0).tolist())"
    assert run_python(site, code) == "[1.0, 3.0, 5.0]"
    assert "torch/extension.h" in (src / "torch_ext_fixture" / "ops.cpp").read_text()
    assert torch.__version__ in run_python(site, "import torch; print(torch.__version__)")
    assert "[exit 0 after" in log.read_text()
