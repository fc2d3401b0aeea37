"""The users' own builds end to end, as a user runs them: ``python pipeline.py --cuda cpu --py X.Y --wheel <a source
build's wheel>`` on linux-64 and on win-64 (the smoke under Wine), then ``pip install --pre torch==<that version>
--index-url <channel>/whl/simple``.

The source builds are fixtures (tests/own_builds.py): real releases' wheels under an own build's version
(``X.Y.Za0+git1eba9b3``, torch/version.py saying so) and, on win-64, in a source build's shape (no libiomp5md.dll:
the builder's MKL and Intel OpenMP came from its environment; no VC runtime, as upstream's wheels have none), so the
repair must vendor them from the providers. CI runs the linux-64 one; the win-64 releases run in the nightly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import companion_fixture
from tests.builders import real_torch_wheel, torch_plan
from tests.conftest import REPODATA, ROOT
from tests.install_lines import conda_takes, pip_takes, printed, pypi_stand_in
from tests.own_builds import own_build
from torchbuild.config.options import RunOptions
from torchbuild.stages.source import fetch

pytestmark = pytest.mark.slow

OPENMP = ("libiomp5md.dll", "libiompstubs5md.dll")


def pipeline(
    workspace: Path, *args: str, matrix: Path = ROOT / "matrix.yaml", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args, "--matrix", str(matrix),
         "--repodata", str(REPODATA), "--compression-level", "1"],
        cwd=workspace, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


def passes_every_stage(
    workspace: Path, wheel: Path, platform: str, python: str, *more: str, matrix: Path = ROOT / "matrix.yaml",
    env: dict[str, str] | None = None,
) -> str:  # fmt: skip
    """Runs the cell on ``wheel`` (``more``: further options); asserts what the user sees; returns what was printed."""
    args = ("--platform", platform, "--cuda", "cpu", "--py", python, "--wheel", str(wheel), *more)
    proc = pipeline(workspace, *args, matrix=matrix, env=env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-6000:]
    version = wheel.name.split("-")[1]
    release = version.split("a0")[0]
    assert f"{version} is a source build of {release}: using {release}'s facts; its version {version} is kept" in said
    for stage in ("source", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish"):
        assert f"✓ {stage}" in said, stage
    assert "all cells passed" in said
    channel = workspace / "channel"
    # pip takes a pre-release only when asked for it: the run's install line pins it, with --pre
    assert f"pip install --pre --index-url {channel.as_uri()}/whl/simple torch=={version}" in proc.stdout
    assert (channel / "whl" / "simple" / "torch" / wheel.name).is_file()
    assert list(channel.glob(f"{platform}/pytorch-{release}a0-py{python}_cpu_git1eba9b3_0.conda"))
    return said


def pip_installs_the_prerelease(channel: Path, version: str, target: Path, platform_args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--pre", "--no-deps", "--target", str(target), *platform_args,
         "--index-url", (channel / "whl" / "simple").as_uri(), f"torch=={version}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / f"torch-{version}.dist-info" / "METADATA").is_file()
    assert f"__version__ = '{version}'" in (target / "torch" / "version.py").read_text(encoding="utf-8")


def test_a_linux_source_build_passes_every_stage_and_installs_from_the_channel(tmp_path: Path) -> None:
    """With a companion compiled from its checkout against it (the FIXTURE visionfixture, tests/companion_fixture.py):
    before, an own build shipped no companion ("torchvision 0.24.1 requires torch==2.9.1")."""
    version = "2.13.0a0+git1eba9b3"
    wheel = own_build(real_torch_wheel(), tmp_path / "dist", version)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    src, head = companion_fixture.checkout(workspace / "src")
    data = companion_fixture.data(workspace / "data")
    matrix = companion_fixture.matrix(workspace / "project")
    said = passes_every_stage(workspace, wheel, "linux-64", "3.11", "--companion-source", f"visionfixture={src}",
                              matrix=matrix, env={"TORCHBUILD_DATA": str(data)})  # fmt: skip
    companion = f"0.1.0a0+{head[:7]}"
    pin = "pytorch 2.13.0a0 py3.11_cpu_git1eba9b3_0"
    assert f"visionfixture {companion}: compiled from --companion-source visionfixture={src}" in said
    assert f"which requires {pin}" in said and f"PYTORCH_VERSION={version}" in (
        workspace / "build" / "linux-64-cpu-py3.11" / "build-visionfixture.log").read_text(encoding="utf-8")
    assert f"(Requires-Dist torch=={version}, as its setup.py wrote it)" in said
    channel = workspace / "channel"
    assert list(channel.glob(f"linux-64/visionfixture-0.1.0a0-py3.11_cpu_git1eba9b3_{head[:7]}_0.conda"))
    assert f"torch=={version} visionfixture=={companion}" in said  # the run's pip line pins both
    report = json.loads((workspace / "build" / "report.json").read_text(encoding="utf-8"))
    smoked = {c["name"]: c for stage in report["cells"][0]["stages"] for c in stage["checks"]}
    for kind in ("wheel", "conda"):  # its import beside this torch, and its op by the matrix's test_command
        assert smoked[f"{kind}: companion import"]["message"].startswith(f"beside torch {version}: visionfixture ")
        assert smoked[f"{kind}: test_command"]["status"] == "passed", smoked[f"{kind}: test_command"]
    pip_installs_the_prerelease(channel, version, tmp_path / "installed", [])
    stand_in = pypi_stand_in(tmp_path / "pypi", "torch", "visionfixture")
    (line,) = printed(said, "pip")
    taken = pip_takes(line, stand_in, tmp_path / "report.json", no_deps=True)
    assert {name: t.version for name, t in taken.items()} == {"torch": version, "visionfixture": companion}
    (conda,) = printed(said, "conda")
    solved = conda_takes(conda, also=((REPODATA / "conda-forge").as_uri(),))
    assert solved["visionfixture"].version == f"0.1.0a0 py3.11_cpu_git1eba9b3_{head[:7]}_0"
    assert solved["pytorch"].version == "2.13.0a0 py3.11_cpu_git1eba9b3_0"


@pytest.mark.nightly
@pytest.mark.parametrize(("release", "python"), [("2.1.2", "3.11"), ("2.9.1", "3.11"), ("2.13.0", "3.12")])
def test_a_windows_source_build_gets_its_openmp_and_vc_runtime_vendored(
    tmp_path: Path, release: str, python: str
) -> None:
    plan = torch_plan("win-64", "cpu", python, release)
    upstream = fetch(plan, RunOptions().cache_dir, tmp_path / "fetch.log", version=release).path
    version = f"{release}a0+git1eba9b3"
    wheel = own_build(upstream, tmp_path / "dist", version, drop=lambda name: name.lower().endswith(OPENMP))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    said = passes_every_stage(workspace, wheel, "win-64", python)
    assert "libiomp5md.dll (wheel intel_openmp" in said and "msvcp140.dll (wheel msvc_runtime" in said
    cp = "cp" + python.replace(".", "")
    pip_installs_the_prerelease(workspace / "channel", version, tmp_path / "installed",
                                ["--platform", "win_amd64", "--python-version", python, "--implementation", "cp",
                                 "--abi", cp, "--only-binary", ":all:"])  # fmt: skip
