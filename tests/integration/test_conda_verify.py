"""The conda and verify stages end to end: on a small wheel made in tmp (fast), and on the real torch 2.13.0 CPU
wheel for the linux-64 / cpu / py3.11 Plan (slow, one build per module, shared by its tests)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel, real_torch_wheel, source_info, torch_plan, with_sbom
from tests.conftest import REPODATA, Scratch
from tests.integration.support_conda import repack, tiny_torch_wheel
from torchbuild.conda.checks.package import CondaArchive, read_package
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed, UserError
from torchbuild.plan import Plan
from torchbuild.results import Artifact, Check, StageResult
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.verify import stage as verify

SITE = "lib/python3.11/site-packages"
TINY_REQUIRES = (
    "filelock",
    "typing-extensions>=4.10.0",
    'pyyaml; extra == "pyyaml"',
    'colorama; platform_system == "Windows"',
)


def context(root: Path, plan: Plan, inputs: dict[str, Artifact], **options: object) -> Context:
    repodata = REPODATA if REPODATA.is_dir() else None
    opts = RunOptions(**{"repodata": repodata, "compression_level": 3, **options})
    wheel = inputs.get("repaired_wheel")
    if wheel is not None and wheel.path.is_file():  # the source stage's record of where the wheel came from
        inputs = {**inputs, "source_info": source_info(root / "source", wheel.path)}
    return Context(plan=plan, root=root, options=opts, inputs=inputs)


def statuses(checks: tuple[Check, ...]) -> dict[str, str]:
    return {c.code: c.status for c in checks}


@dataclass(frozen=True)
class Built:
    plan: Plan
    root: Path
    wheel: Artifact
    conda: StageResult
    package: CondaArchive


def build(root: Path, plan: Plan, wheel: Path, **options: object) -> Built:
    wheel_artifact = Artifact.of(wheel)
    result = conda.run(context(root, plan, {"repaired_wheel": wheel_artifact}, **options))
    return Built(plan, root, wheel_artifact, result, read_package(result.outputs["conda_package"].path))


# --- a small wheel ---------------------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path: Path) -> Built:
    plan = torch_plan()
    wheel = tiny_torch_wheel(tmp_path, plan, TINY_REQUIRES)
    return build(tmp_path / "work", plan, wheel)


def test_conda_stage_makes_the_plans_package(tiny: Built) -> None:
    plan, pkg = tiny.plan, tiny.package
    artifact = tiny.conda.outputs["conda_package"]
    assert artifact.path.name == plan.root.conda.filename == "pytorch-2.13.0-py3.11_cpu_0.conda"
    assert artifact.path.parent == tiny.root / plan.stage_dirs["conda"]
    assert pkg.index["depends"] == [*plan.root.conda.depends, "filelock", "typing_extensions >=4.10.0"]
    assert (pkg.index["name"], pkg.index["version"], pkg.index["build"]) == ("pytorch", "2.13.0", "py3.11_cpu_0")
    files = {m.name for m in pkg.files()}
    assert f"{SITE}/torch/__init__.py" in files
    assert f"{SITE}/torch-2.13.0+cpu.dist-info/INSTALLER" in files
    assert "bin/torchrun" in files
    assert {"info/recipe/meta.yaml", "info/recipe/conda_build_config.yaml", "info/recipe/build.sh"} <= set(pkg.info)
    assert "typing_extensions >=4.10.0" in pkg.info["info/recipe/meta.yaml"].decode()
    assert not (artifact.path.parent / "payload").exists(), "the staging prefix is removed after assembly"
    assert tiny.conda.message.startswith("pytorch-2.13.0-py3.11_cpu_0.conda: ")


def test_the_stage_opens_each_wheel_once_for_torch_and_for_a_package_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its metadata, its members' names and sizes, its time and its install are read from one checked open."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")  # torch and torchvision beside it
    (vision,) = plan.dependents
    torch_wheel = tiny_torch_wheel(tmp_path / "dist", plan, TINY_REQUIRES)
    vision_wheel = with_sbom(make_wheel(tmp_path / "dist", vision.wheel, {"torchvision/__init__.py": b""},
                                        requires=["torch==2.5.1", "numpy"]))  # fmt: skip
    inputs = {"repaired_wheel": Artifact.of(torch_wheel), "repaired_wheel[torchvision]": Artifact.of(vision_wheel)}
    opened: list[str] = []
    real = zipfile.ZipFile.__init__

    def counted(self: zipfile.ZipFile, file: object, *args: object, **kwargs: object) -> None:
        opened.append(Path(str(file)).name)
        real(self, file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(zipfile.ZipFile, "__init__", counted)
    result = conda.run(context(tmp_path / "work", plan, inputs))
    assert set(result.outputs) == {"conda_package", "conda_package[torchvision]"}
    assert (opened.count(torch_wheel.name), opened.count(vision_wheel.name)) == (1, 1)


def test_installed_console_script_runs_with_the_environments_python(tiny: Built, tmp_path: Path) -> None:
    # Lay the payload out as a prefix whose bin/python is this interpreter: the script must find it beside itself.
    prefix = tmp_path / "prefix"
    _extract_payload(tiny.package.path, prefix)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    env = {**os.environ, "PYTHONPATH": str(prefix / SITE)}
    done = subprocess.run([prefix / "bin" / "torchrun"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    record = (prefix / SITE / "torch-2.13.0+cpu.dist-info" / "RECORD").read_text()
    assert "../../../bin/torchrun,sha256=" in record
    assert (prefix / SITE / "torch-2.13.0+cpu.dist-info" / "INSTALLER").read_text() == "conda\n"


def test_wheel_data_directory_goes_where_pip_puts_it(tmp_path: Path) -> None:
    plan = torch_plan()
    data = "torch-2.13.0+cpu.data"
    files = {
        "torch/__init__.py": b"",
        f"{data}/scripts/torch-tool": b"#!python\nprint('tool ran')\n",
        f"{data}/headers/torch.h": b"#pragma once\n",
        f"{data}/data/share/torch/notes.txt": b"notes\n",
        f"{data}/purelib/torch_extra.py": b"EXTRA = 1\n",
    }
    built = build(tmp_path / "work", plan, make_wheel(tmp_path, plan.root.wheel, files))
    payload = {m.name for m in built.package.files()}
    assert {"bin/torch-tool", "include/python3.11/torch/torch.h", "share/torch/notes.txt"} <= payload
    assert f"{SITE}/torch_extra.py" in payload
    assert not any(data in name for name in payload)
    prefix = tmp_path / "prefix"
    _extract_payload(built.package.path, prefix)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    ran = subprocess.run([prefix / "bin" / "torch-tool"], capture_output=True, text=True, timeout=60)
    assert ran.stdout == "tool ran\n"
    record = (prefix / SITE / "torch-2.13.0+cpu.dist-info" / "RECORD").read_text()
    assert "../../../bin/torch-tool,sha256=" in record and "../../../share/torch/notes.txt,sha256=" in record
    verified = verify.run(context(built.root, plan, {"conda_package": built.conda.outputs["conda_package"]}))
    assert [c for c in verified.checks if c.status == "failed"] == []


def test_hidden_files_of_the_wheel_are_in_the_package(tmp_path: Path) -> None:
    # delvewheel writes torch.libs/.load-order-<dist> for Pythons before 3.8 (torch 1.8.1's wheel has one); RECORD
    # lists it, so a package without it is a dist-info naming a file that is not there.
    plan = torch_plan()
    files = {"torch/__init__.py": b"", "torch.libs/.load-order-torch-2.13.0+cpu": b"msvcp140.dll\n"}
    built = build(tmp_path / "work", plan, make_wheel(tmp_path, plan.root.wheel, files))
    assert f"{SITE}/torch.libs/.load-order-torch-2.13.0+cpu" in {m.name for m in built.package.files()}


def test_unknown_wheel_data_directory_is_refused(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel = make_wheel(tmp_path, plan.root.wheel, {"torch-2.13.0+cpu.data/stuff/x": b""})
    with pytest.raises(StageFailed, match=r"torch-2.13.0\+cpu.data/stuff/; valid: data, headers, platlib"):
        conda.run(context(tmp_path, plan, {"repaired_wheel": Artifact.of(wheel)}))


def test_wheel_member_escaping_the_prefix_is_refused(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel = make_wheel(tmp_path, plan.root.wheel, {"torch/__init__.py": b"", "../../etc/evil": b""})
    with pytest.raises(StageFailed, match=r"member '../../etc/evil' escapes the install root \('..' component\)"):
        conda.run(context(tmp_path / "work", plan, {"repaired_wheel": Artifact.of(wheel)}))
    assert not (tmp_path / "etc").exists()


def test_verify_passes_on_the_small_package(tiny: Built) -> None:
    inputs = {"repaired_wheel": tiny.wheel, "conda_package": tiny.conda.outputs["conda_package"]}
    result = verify.run(context(tiny.root, tiny.plan, inputs))
    got = statuses(result.checks)
    assert [c for c in result.checks if c.status == "failed"] == []
    assert got["TB104"] == got["TB201"] == got["TB202"] == "passed"
    if REPODATA.is_dir():
        assert got["TB301"] == "passed"
    saved = json.loads((tiny.root / tiny.plan.stage_dirs["verify"] / "checks.json").read_text())
    assert len(saved) == len(result.checks)
    assert result.message.startswith(f"{sum(v == 'passed' for v in got.values())} passed")


def test_verify_fails_naming_the_check_and_file(tiny: Built, tmp_path: Path) -> None:
    original = tiny.conda.outputs["conda_package"].path
    tampered = repack(original, tmp_path / original.name, {f"{SITE}/torch/__init__.py": b"__version__ = 'evil!'\n"})
    inputs = {"repaired_wheel": tiny.wheel, "conda_package": Artifact.of(tampered)}
    with pytest.raises(StageFailed) as caught:
        verify.run(context(tiny.root, tiny.plan, inputs))
    message = str(caught.value)
    assert message.startswith("verify: ")
    assert f"C1146 {tampered}" in message and f"{SITE}/torch/__init__.py" in message
    assert statuses(caught.value.checks)["C1146"] == "failed"
    assert statuses(caught.value.checks)["C1101"] == "passed"


def test_verify_checks_the_file_against_what_the_conda_stage_recorded(tiny: Built) -> None:
    recorded = tiny.conda.outputs["conda_package"]
    stale = Artifact(path=recorded.path, sha256="0" * 64, size=recorded.size)
    with pytest.raises(StageFailed, match=r"TB104 .*sha256 on disk differs"):
        verify.run(context(tiny.root, tiny.plan, {"conda_package": stale}))


def test_tar_bz2_format(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel = tiny_torch_wheel(tmp_path, plan)
    built = build(tmp_path / "work", plan, wheel, conda_format="tar.bz2")
    assert built.package.path.name == "pytorch-2.13.0-py3.11_cpu_0.tar.bz2"
    inputs = {"conda_package": built.conda.outputs["conda_package"]}
    result = verify.run(context(built.root, plan, inputs, conda_format="tar.bz2"))
    assert statuses(result.checks)["TB103"] == "skipped"
    assert statuses(result.checks)["TB104"] == "passed"


def test_source_date_epoch_makes_the_package_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    plan = torch_plan()
    wheel = tiny_torch_wheel(tmp_path, plan)
    first = build(tmp_path / "a", plan, wheel)
    second = build(tmp_path / "b", plan, wheel)
    assert first.package.index["timestamp"] == 1700000000 * 1000
    assert first.conda.outputs["conda_package"].sha256 == second.conda.outputs["conda_package"].sha256


def test_bad_inputs_give_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = torch_plan()
    with pytest.raises(StageFailed, match=r"^conda: no wheel to package"):
        conda.run(context(tmp_path, plan, {}))
    missing = Artifact(path=tmp_path / plan.root.wheel, sha256="", size=0)
    with pytest.raises(StageFailed, match=re.escape(f"conda: wheel not found: {tmp_path / plan.root.wheel}")):
        conda.run(context(tmp_path, plan, {"repaired_wheel": missing}))
    wheel = Artifact.of(tiny_torch_wheel(tmp_path, plan))
    with pytest.raises(UserError, match="compression level 30 is out of range for conda: valid: 1 to 22"):
        conda.run(context(tmp_path, plan, {"repaired_wheel": wheel}, compression_level=30))
    with pytest.raises(StageFailed, match=r"^verify: nothing to verify"):
        verify.run(context(tmp_path, plan, {}))


def _extract_payload(package: Path, prefix: Path) -> None:
    import zipfile

    from backports import zstd

    stem = package.name.removesuffix(".conda")
    with (
        zipfile.ZipFile(package) as zf,
        zf.open(f"pkg-{stem}.tar.zst") as raw,
        zstd.open(raw, "rb") as stream,
        tarfile.open(fileobj=stream, mode="r|") as tar,
    ):
        tar.extractall(prefix, filter="tar")


# --- the real torch wheel --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_built(module_scratch: Scratch) -> Built:
    root = module_scratch("torch-conda")
    wheel = with_sbom(Path(shutil.copy(real_torch_wheel(), root / real_torch_wheel().name)))  # as the repair leaves it
    return build(root, torch_plan(), wheel, compression_level=3, compression_threads=2)


@pytest.fixture(scope="module")
def torch_verified(torch_built: Built) -> StageResult:
    inputs = {"repaired_wheel": torch_built.wheel, "conda_package": torch_built.conda.outputs["conda_package"]}
    return verify.run(context(torch_built.root, torch_built.plan, inputs))


@pytest.mark.slow
def test_torch_package_index(torch_built: Built) -> None:
    index, plan = torch_built.package.index, torch_built.plan
    assert index["name"] == "pytorch"
    assert index["version"] == "2.13.0"
    assert index["build"] == "py3.11_cpu_0"
    assert index["build_number"] == 0
    assert index["subdir"] == "linux-64"
    assert index["license"] == "BSD-3-Clause"
    assert isinstance(index["timestamp"], int)
    depends = index["depends"]
    assert set(plan.root.conda.depends) <= set(depends)
    wheel_requires = {
        "filelock",
        "typing_extensions >=4.10.0",
        "sympy >=1.13.3",
        "networkx >=2.5.1",
        "jinja2",
        "fsspec >=0.8.5",
        "setuptools >=77.0.3",
    }
    assert wheel_requires <= set(depends)
    assert not any(d.startswith(("optree", "opt_einsum", "pyyaml")) for d in depends), "extras are not depends"


@pytest.mark.slow
def test_torch_package_payload(torch_built: Built) -> None:
    files = {m.name for m in torch_built.package.files()}
    assert f"{SITE}/torch/__init__.py" in files
    assert f"{SITE}/torch/lib/libtorch_cpu.so" in files
    assert {"bin/torchrun", "bin/torchfrtrace"} <= files
    assert "info/licenses/LICENSE" in torch_built.package.info
    assert len(files) > 12000


@pytest.mark.slow
def test_torch_package_verifies_and_solves(torch_verified: StageResult) -> None:
    got = statuses(torch_verified.checks)
    assert [c for c in torch_verified.checks if c.status == "failed"] == []
    assert got["C1146"] == got["TB101"] == got["TB201"] == got["TB104"] == "passed"
    if not REPODATA.is_dir():
        pytest.skip(f"skipped: the real repodata is not at {REPODATA}")
    solve = next(c for c in torch_verified.checks if c.code == "TB301")
    assert solve.status == "passed"
    assert solve.message.startswith("pytorch-2.13.0-py3.11_cpu_0 from the new package's channel, with python 3.11.")
