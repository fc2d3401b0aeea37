"""The README's main job, end to end on this host, as a user runs it: `python pipeline.py --cuda cpu --py 3.11`.

One real run (the local torch 2.13.0 CPU wheel found through pip's configuration) is shared by the tests below;
they check what a user sees: the step log, the reports, resume, the channel, and the two "must work" commands.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.builders import make_wheel
from tests.conftest import REPODATA, ROOT, Scratch
from tests.integration.support_faults import left_running, processes_of
from torchbuild.plan import STAGES

pytestmark = pytest.mark.slow

CELL = "linux-64-cpu-py3.11"


@dataclass(frozen=True)
class Run:
    workspace: Path
    result: subprocess.CompletedProcess[str]

    @property
    def channel(self) -> Path:
        return self.workspace / "channel"

    @property
    def report(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.workspace / "build" / "report.json").read_text())
        return data


def pipeline(workspace: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args, "--repodata", str(REPODATA)],
        cwd=workspace,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000", "COLUMNS": "200", **(env or {})},
    )


def stages_of(report: dict[str, object]) -> dict[str, str]:
    cells = report["cells"]
    assert isinstance(cells, list)
    return {s["stage"]: s["status"] for s in cells[0]["stages"]}


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under a channel with its sha256: 'the channel is exactly as it was'."""
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def first_run(module_scratch: Scratch) -> Run:
    workspace = module_scratch("workspace")
    result = pipeline(workspace, "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"))
    return Run(workspace=workspace, result=result)


def test_main_job_passes_every_stage(first_run: Run) -> None:
    result = first_run.result
    assert result.returncode == 0, result.stdout + result.stderr
    log = result.stderr
    assert "the configured indexes offer 2.13.0 for this cell: using it" in log
    statuses = stages_of(first_run.report)
    assert statuses == {
        "source": "passed",
        "build": "skipped",  # prebuilt: nothing to compile
        "repair": "passed",
        "conda": "passed",
        "verify": "passed",
        "smoke-wheel": "passed",
        "smoke-conda": "passed",
        "publish": "passed",
    }
    assert "all cells passed" in result.stdout  # the results on stdout, the progress on stderr
    assert "▶ source" in log and "▶ source" not in result.stdout
    url = first_run.channel.as_uri()
    assert f"  conda install -c {url} pytorch\n  pip install --index-url {url}/whl/simple torch==2.13.0+cpu\n" in (
        result.stdout
    )
    conda = first_run.channel / "linux-64" / "pytorch-2.13.0-py3.11_cpu_0.conda"
    assert conda.is_file()
    wheel = first_run.channel / "whl" / "simple" / "torch" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert wheel.is_file()
    page = (first_run.channel / "whl" / "simple" / "torch" / "index.html").read_text()
    # The '+' of the local version is quoted in the link (S3 would read a raw '+' in a path as a space).
    assert f"{quote(wheel.name)}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}" in page
    repodata = json.loads((first_run.channel / "linux-64" / "repodata.json").read_text())
    record = repodata["packages.conda"][conda.name]
    assert record["build"] == "py3.11_cpu_0" and record["version"] == "2.13.0"
    assert (first_run.channel / "linux-64" / "repodata.json.zst").is_file()
    assert (first_run.channel / "noarch" / "repodata.json").is_file()


def test_main_job_says_why_it_ships_no_companion(first_run: Run) -> None:
    """One line per companion, before the stages and in the summary; the run passes; report.json says it too."""
    log = first_run.result.stderr
    vision = (
        f"{CELL}: torchvision: not shipped: PyPI's linux-64 wheel of torchvision 0.28.0 is a CUDA 13.0 build (+cu130) "
        "linking libc10_cuda.so, libcudart.so.13, libtorch_cuda.so, which this cell's CPU torch does not have "
        "(it fails at import), and PyPI has no CPU build of it; to ship one, name a checkout the stages compile "
        "against this cell's torch: packages: {torchvision: {git_ref: v0.28.0}} in matrix.yaml"
    )
    assert vision in log and first_run.result.returncode == 0
    assert f"{CELL}: torchaudio: not shipped: no torchaudio release pins or names torch 2.13.0" in log
    companions = first_run.report["cells"][0]["companions"]  # type: ignore[index]
    assert [(c["name"], c["status"]) for c in companions] == [
        ("torchvision", "not shipped"),
        ("torchaudio", "not shipped"),
    ]
    assert not list(first_run.channel.rglob("torchvision*")) and not list(first_run.channel.rglob("torchaudio*"))


def test_reports_and_state(first_run: Run) -> None:
    build = first_run.workspace / "build"
    state = json.loads((build / CELL / "state.json").read_text())
    assert set(state["stages"]) == set(STAGES)
    artifacts = first_run.report["cells"][0]["artifacts"]  # type: ignore[index]
    conda = Path(artifacts["conda_package"]["path"])
    assert artifacts["conda_package"]["sha256"] == hashlib.sha256(conda.read_bytes()).hexdigest()
    markdown = (build / "report.md").read_text()
    assert f"`{CELL}`" in markdown and conda.name in markdown
    junit = (build / "junit.xml").read_text()
    assert 'name="smoke-wheel"' in junit and 'name="smoke-conda"' in junit and "<failure" not in junit


def test_rerun_skips_finished_stages_and_keeps_the_channel(first_run: Run) -> None:
    before = snapshot(first_run.channel)
    again = pipeline(first_run.workspace, "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"))
    assert again.returncode == 0, again.stderr
    statuses = stages_of(json.loads((first_run.workspace / "build" / "report.json").read_text()))
    assert statuses.pop("publish") == "passed"  # always checked against the channel; identical files are a no-op
    assert set(statuses.values()) == {"cached"}
    assert "(unchanged)" in again.stderr
    assert snapshot(first_run.channel) == before


def test_pip_installs_from_the_channel(first_run: Run, tmp_path: Path) -> None:
    """pip install --index-url file://$PWD/channel/whl/simple torch==2.13.0+cpu (the line the run prints), in a fresh
    venv."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    index = (first_run.channel / "whl" / "simple").as_uri()
    line = f"pip install --index-url {index} torch==2.13.0+cpu"
    assert line in first_run.result.stdout
    clean = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    # Only the channel may provide torch: no find-links, and the report proves where it came from.
    report = tmp_path / "report.json"
    install = subprocess.run(
        [str(python), "-m", *line.split(), "--no-cache-dir", "--find-links", str(tmp_path / "none"),
         "--report", str(report)],
        capture_output=True, text=True, check=False, env=clean,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    torch_item = next(i for i in json.loads(report.read_text())["install"] if i["metadata"]["name"] == "torch")
    assert torch_item["download_info"]["url"].startswith(index)
    check = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__, (torch.ones(2) * 2).sum().item())"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.stdout.split() == ["2.13.0+cpu", "4.0"], check.stderr


def test_rattler_solves_and_installs_from_the_channel(first_run: Run, tmp_path: Path) -> None:
    """py-rattler solve + install of pytorch from file://$PWD/channel into a fresh prefix; import torch works."""
    script = tmp_path / "install.py"
    script.write_text(INSTALL_SCRIPT)
    prefix = tmp_path / "prefix"
    venv.create(prefix, with_pip=True)
    result = subprocess.run(
        [sys.executable, str(script), first_run.channel.as_uri(), (REPODATA / "conda-forge").as_uri(), str(prefix)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"pytorch 2.13.0 py3.11_cpu_0 {first_run.channel.as_uri()}" in result.stdout
    assert "installed 1" in result.stdout
    # The conda package's python requirements come from pip here: the real repodata has no package files.
    python = prefix / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "filelock", "typing-extensions>=4.10", "sympy>=1.13.3",
         "networkx", "jinja2", "fsspec", "setuptools"],
        check=True, capture_output=True,
    )  # fmt: skip
    check = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__, torch.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    version, location = check.stdout.split()
    assert version == "2.13.0+cpu", check.stderr
    assert location.startswith(str(prefix / "lib" / "python3.11" / "site-packages"))
    assert list((prefix / "conda-meta").glob("pytorch-2.13.0-py3.11_cpu_0.json"))


INSTALL_SCRIPT = """
import asyncio, os, sys
from rattler import BuildString, GenericVirtualPackage, MatchSpec, PackageName, Version, install, solve

channel, conda_forge, prefix = sys.argv[1:4]

async def main():
    virtual = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
               for n, v in [("__unix", "0"), ("__linux", "6.1"), ("__glibc", "2.36")]]
    # The real repodata (no package files here) proves the whole environment is satisfiable ...
    records = await solve([channel, conda_forge], [MatchSpec(s, strict=False) for s in ("pytorch", "python 3.11.*")],
                          platforms=["linux-64", "noarch"], virtual_packages=virtual)
    for r in records:
        print(r.name.normalized, r.version, r.build, r.channel)
    # ... and the packages of our channel, which do have files, are installed into the prefix.
    ours = [r for r in records if r.channel.rstrip("/") == channel.rstrip("/")]
    await install(ours, target_prefix=prefix, show_progress=False)
    print("installed", len(ours))

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # py-rattler can crash at interpreter exit (see torchbuild/conda/rattler_child.py)
"""


def workspace_from(first_run: Run, tmp_path: Path) -> Path:
    """A second workspace with the first run's channel and state: its stages are cached, its channel its own."""
    workspace = tmp_path / "ws"
    shutil.copytree(first_run.channel, workspace / "channel")
    (workspace / "build" / CELL).mkdir(parents=True)
    shutil.copy2(first_run.workspace / "build" / CELL / "state.json", workspace / "build" / CELL / "state.json")
    return workspace


def test_bad_wheels_leave_the_channel_as_it_was(first_run: Run, tmp_path: Path) -> None:
    workspace = workspace_from(first_run, tmp_path)
    before = snapshot(workspace / "channel")
    truncated = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    source = next(first_run.channel.glob("whl/simple/torch/*.whl"))
    truncated.write_bytes(source.read_bytes()[: 1 << 20])
    small = tmp_path / "small"
    escaping = make_wheel(small / "escape", truncated.name, extra_members={"../evil.py": b"import os\n"})
    missing = tmp_path / "missing.whl"  # a usage error (exit 2) before any stage runs
    result = pipeline(workspace, "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"),
                      "--wheel", str(missing))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"--wheel {missing}: no such file" in result.stderr and "Traceback" not in result.stderr
    assert snapshot(workspace / "channel") == before
    cases = {
        str(truncated): "not a wheel",
        str(make_wheel(small, "numpy-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")): "numpy",
        str(make_wheel(small, "torch-2.13.0+cpu-cp311-cp311-win_amd64.whl")): "win_amd64",
        str(escaping): "../evil.py",
    }
    for wheel, message in cases.items():
        result = pipeline(
            workspace, "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"), "--wheel", wheel
        )
        assert result.returncode == 1, result.stderr
        assert "source" in result.stderr and message in result.stderr
        assert Path(wheel).name in result.stderr
        assert "Traceback" not in result.stderr
        assert snapshot(workspace / "channel") == before


def test_a_different_file_under_a_published_name_is_refused(first_run: Run, tmp_path: Path) -> None:
    workspace = workspace_from(first_run, tmp_path)
    conda = workspace / "channel" / "linux-64" / "pytorch-2.13.0-py3.11_cpu_0.conda"
    conda.write_bytes(conda.read_bytes() + b"\0")  # someone else's build under our name
    before = snapshot(workspace / "channel")
    result = pipeline(workspace, "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"))
    assert result.returncode == 1
    assert "publish" in result.stderr and "refusing to overwrite" in result.stderr and conda.name in result.stderr
    assert snapshot(workspace / "channel") == before


def _checks_running(workspace: Path, timeout: float = 300) -> None:
    """Wait until the smoke's check processes (run_checks.py --child, in the workspace's environments) run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any("run_checks.py" in cmd and "--child" in cmd for cmd in processes_of(str(workspace)).values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"no smoke check process ran in {timeout} s")


def test_a_pipeline_killed_during_the_smoke_leaves_nothing_running_and_the_next_run_passes(first_run: Run) -> None:
    # Before: the venv's python running the checks and its children ran on for seconds after a kill -9 (an
    # out-of-memory kill, a CI runner's cancel). Last in this module: it runs the smoke stages of the run again.
    argv = [sys.executable, str(ROOT / "pipeline.py"), "smoke", "--only", CELL, "--matrix", str(ROOT / "matrix.yaml")]
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000", "COLUMNS": "200"}
    killed = subprocess.Popen(argv, cwd=first_run.workspace, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _checks_running(first_run.workspace)
    finally:
        killed.kill()
    killed.wait()
    assert left_running(str(first_run.workspace), within_s=5.0) == {}
    again = subprocess.run(argv, cwd=first_run.workspace, env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert stages_of(first_run.report)["smoke-wheel"] == "passed"
