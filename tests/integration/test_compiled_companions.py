"""A companion compiled from a checkout against the cell's own torch, through every stage, as a user runs it
(issue 55): ``python pipeline.py --cuda cpu --py 3.11 --companion-source visionfixture=<checkout>``.

The companion is a FIXTURE shaped like torchvision (tests/fixtures/companion_ext, tests/companion_fixture.py: a
setup.py with torch.utils.cpp_extension, an operator registered with TORCH_LIBRARY, version.txt, a git repository
made here), entered into a copy of companions.yaml (``TORCHBUILD_DATA``); torch is the real 2.13.0 CPU wheel, found
through pip's configuration as the main job finds it, and the compile is gcc's. Its smoke checks are its own import
check (no checks of its own: stages/smoke/resources/checks_beside.py) and the matrix's test_command, which runs its
operator in both fresh environments. One run is shared by the tests below; the own build's is in
tests/integration/test_own_builds.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import companion_fixture as fixture
from tests.conftest import REPODATA, ROOT, Scratch
from tests.install_lines import conda_takes, pip_takes, printed, pypi_stand_in
from torchbuild.conda.archive import read_package

pytestmark = pytest.mark.slow

NAME = fixture.NAME
CELL = "linux-64-cpu-py3.11"
PIN = "pytorch 2.13.0 py3.11_cpu_0"


@dataclass(frozen=True)
class Run:
    workspace: Path
    result: subprocess.CompletedProcess[str]
    head: str  # the fixture checkout's commit
    env: dict[str, str]

    @property
    def said(self) -> str:
        return self.result.stdout + self.result.stderr

    @property
    def version(self) -> str:
        return f"0.1.0a0+{self.head[:7]}"

    def stage_line(self, stage: str) -> str:
        return next(line for line in self.result.stderr.splitlines() if line.startswith(f"✓ {stage} "))

    def checks(self, stage: str) -> dict[str, dict[str, str]]:
        report = json.loads((self.workspace / "build" / "report.json").read_text(encoding="utf-8"))
        found = next(s for s in report["cells"][0]["stages"] if s["stage"] == stage)
        return {c["name"] if not c.get("code") or c["code"] == "TB401" else f"{c['code']} {Path(c['file']).name}": c
                for c in found["checks"]}  # fmt: skip


def compiled_run(workspace: Path, *args: str) -> Run:
    """The cell run with the fixture companion's checkout named on the command line."""
    src, head = fixture.checkout(workspace / "src" / NAME)
    data = fixture.data(workspace / "data")
    matrix = fixture.matrix(workspace / "project")
    env = {**os.environ, "TORCHBUILD_DATA": str(data), "SOURCE_DATE_EPOCH": "1700000000", "COLUMNS": "200",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--cuda", "cpu", "--py", "3.11", "--matrix", str(matrix),
            "--companion-source", f"{NAME}={src}", "--repodata", str(REPODATA), "--compression-level", "1", *args]
    result = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, check=False, env=env)  # fmt: skip
    return Run(workspace, result, head, env)


@pytest.fixture(scope="module")
def run(module_scratch: Scratch) -> Run:
    return compiled_run(module_scratch("compiled"))


def test_the_companion_is_compiled_against_the_cells_torch_and_passes_every_stage(run: Run) -> None:
    assert run.result.returncode == 0, run.said[-6000:]
    version, wheel = run.version, f"{NAME}-{run.version}-cp311-cp311-linux_x86_64.whl"
    assert f"{CELL}: {NAME} {version}: compiled from --companion-source {NAME}=" in run.said
    assert f"(version.txt 0.1.0a0, HEAD {run.head[:7]}) against this cell's torch" in run.said
    assert f"{NAME} {version}'s checkout at {run.head[:12]}" in run.stage_line("source")
    assert (f"{NAME}: compiled {wheel} against torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl in "
            in run.stage_line("build"))  # fmt: skip
    assert "(Requires-Dist torch==2.13.0+cpu, as its setup.py wrote it)" in run.stage_line("build")
    log = (run.workspace / "build" / CELL / f"build-{NAME}.log").read_text(encoding="utf-8")
    assert f"# BUILD_VERSION={version}\n# PYTORCH_VERSION=2.13.0+cpu\n" in log and "[exit 0 after" in log
    repair = run.stage_line("repair")
    assert "left to torch: libc10.so, libtorch_cpu.so; left to torch's declared requirements: nothing" in repair
    conda = f"{NAME}-0.1.0a0-py3.11_cpu_{run.head[:7]}_0.conda"
    assert f"{conda}: " in run.stage_line("conda") and f"depends on python >=3.11,<3.12.0a0, {PIN}" in run.said
    verify = run.checks("verify")
    assert verify[f"TB111 {conda}"]["status"] == "passed" and PIN in verify[f"TB111 {conda}"]["message"]
    assert verify[f"TB112 {conda}"]["status"] == "passed"
    assert "from torch's package: libc10.so, libtorch_cpu.so" in verify[f"TB112 {conda}"]["message"]
    for kind in ("wheel", "conda"):
        checks = run.checks(f"smoke-{kind}")
        imported = checks[f"{kind}: companion import"]
        assert imported["status"] == "passed", imported
        assert imported["message"].startswith(f"beside torch 2.13.0+cpu: {NAME} {version} from ")
        assert checks[f"{kind}: test_command"]["status"] == "passed", checks[f"{kind}: test_command"]
    assert "all cells passed" in run.said


def test_the_shipped_companion_pins_the_exact_torch_and_leaves_torchs_libraries_to_torch(run: Run) -> None:
    channel = run.workspace / "channel"
    (wheel,) = (channel / "whl" / "simple" / NAME).glob("*.whl")
    assert wheel.name.startswith(f"{NAME}-{run.version}-cp311-cp311-manylinux_")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"{NAME}-{run.version}.dist-info/METADATA").decode()
    assert "Requires-Dist: torch==2.13.0+cpu" in metadata.splitlines()
    assert not [n for n in names if "libtorch" in n or "libc10" in n], names  # never vendored: torch's own
    (conda,) = (channel / "linux-64").glob(f"{NAME}-*.conda")
    index = json.loads(read_package(conda, payload=False).info["info/index.json"])
    assert "pytorch ==2.13.0 py3.11_cpu_0" in index["depends"] or PIN in index["depends"], index["depends"]


def test_every_install_line_the_run_prints_takes_the_channels_torch_and_companion(run: Run, tmp_path: Path) -> None:
    """With a stand-in for PyPI that offers torch 99.0 and visionfixture 99.0 (pip reads every index as one)."""
    channel = run.workspace / "channel"
    stand_in = pypi_stand_in(tmp_path / "pypi", "torch", NAME)
    (pip,) = printed(run.result.stdout, "pip")
    assert pip.endswith(f"torch==2.13.0+cpu {NAME}=={run.version}"), pip
    taken = pip_takes(pip, stand_in, tmp_path / "report.json", no_deps=True)
    assert {name: t.version for name, t in taken.items()} == {"torch": "2.13.0+cpu", NAME: run.version}
    assert all(t.source.startswith(channel.as_uri()) for t in taken.values()), taken
    (conda,) = printed(run.result.stdout, "conda")
    solved = conda_takes(conda, also=((REPODATA / "conda-forge").as_uri(),))  # conda-forge has a pytorch of its own
    assert solved["pytorch"].version == "2.13.0 py3.11_cpu_0"
    assert solved[NAME].version == f"0.1.0a0 py3.11_cpu_{run.head[:7]}_0"
    assert {solved[name].source.rstrip("/") for name in ("pytorch", NAME)} == {channel.as_uri()}


def test_publish_of_the_build_folder_publishes_the_companion_too(run: Run, tmp_path: Path) -> None:
    """``pipeline.py publish build/`` (the nightly's publish job) takes every package the run's publish stage does.
    Before: only conda_package and repaired_wheel, and the companion never reached the channel there."""
    other = tmp_path / "other"
    done = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "publish", str(run.workspace / "build"),
                           "--channel", str(other)], capture_output=True, text=True, check=False, env=run.env,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    for folder in ("linux-64", f"whl/simple/{NAME}", "whl/simple/torch"):
        ours = sorted(p.name for p in (run.workspace / "channel" / folder).iterdir() if not p.name.startswith("."))
        theirs = sorted(p.name for p in (other / folder).iterdir() if not p.name.startswith("."))
        assert theirs == ours, folder
    assert f"{NAME}=={run.version}" in done.stdout
