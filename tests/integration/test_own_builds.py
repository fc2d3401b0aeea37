"""The users' own builds end to end, as a user runs them: ``python pipeline.py --cuda cpu --py X.Y --wheel <a source
build's wheel>`` on linux-64 and on win-64 (the smoke under Wine), then ``pip install --pre torch==<that version>
--index-url <channel>/whl/simple``.

The source builds are fixtures (tests/own_builds.py): real releases' wheels under an own build's version
(``X.Y.Za0+git1eba9b3``, torch/version.py saying so) and, on win-64, in a source build's shape (no libiomp5md.dll:
the builder's MKL and Intel OpenMP came from its environment; no VC runtime, as upstream's wheels have none), so the
repair must vendor them from the providers. CI runs the linux-64 one; the win-64 releases run in the nightly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import real_torch_wheel, torch_plan
from tests.conftest import REPODATA, ROOT
from tests.own_builds import own_build
from torchbuild.config.options import RunOptions
from torchbuild.stages.source import fetch

pytestmark = pytest.mark.slow

OPENMP = ("libiomp5md.dll", "libiompstubs5md.dll")


def pipeline(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "SOURCE_DATE_EPOCH": "1700000000", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args, "--matrix", str(ROOT / "matrix.yaml"),
         "--repodata", str(REPODATA), "--compression-level", "1"],
        cwd=workspace, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


def passes_every_stage(workspace: Path, wheel: Path, platform: str, python: str) -> str:
    """Runs the cell on ``wheel``; asserts what the user sees; returns what was printed."""
    proc = pipeline(workspace, "--platform", platform, "--cuda", "cpu", "--py", python, "--wheel", str(wheel))
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
    assert f"pip install --pre --index-url {channel.as_uri()}/whl/simple torch=={version}" in said
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
    version = "2.13.0a0+git1eba9b3"
    wheel = own_build(real_torch_wheel(), tmp_path / "dist", version)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    passes_every_stage(workspace, wheel, "linux-64", "3.11")
    pip_installs_the_prerelease(workspace / "channel", version, tmp_path / "installed", [])


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
