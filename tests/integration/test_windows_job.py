"""The nightly workflow's Windows build job, as written, on a Windows host with Windows's defaults under Wine.

The `python ...` lines of `.github/workflows/nightly.yml`'s build job are read from the workflow itself and run, one
after another, on one Windows machine (scripts/wine_host.py, python.org's CPython 3.11 under Wine 8.0) set up as
Windows sets one up: a user profile `C:\\users\\Zoë Ng` with TEMP and `%LOCALAPPDATA%\\torchbuild\\Cache` under it,
Python installed in `C:\\Program Files\\Python311`, the checkout in `...\\Documents\\My Projects\\torchbuild`, and each
program's output piped, so written in the ANSI code page (cp1252) as in a CI log. The compile this host cannot do
(`--git-ref`) is the one change: `--wheel` with PyPI's torch 2.13.0 win_amd64 wheel. Then `publish` of what it built,
and pip installs torch from that channel on the same machine. Under Wine, not on Windows.
"""

from __future__ import annotations

import re
import shlex
import shutil
import string
import subprocess
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import pytest
import yaml

from tests.builders import torch_plan
from tests.conftest import REPODATA, ROOT
from tests.integration.test_wine_host import _script
from torchbuild.config.options import RunOptions
from torchbuild.platforms.windows import wine
from torchbuild.stages.source import fetch

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
CELL = "win-64-cpu-py3.11"
TORCH = "2.13.0"
CACHE = RunOptions().cache_dir
# How the `if:` of the build job's steps evaluate for the Windows CPU cell. A condition not listed fails the test, so
# that a change of the workflow is a change here.
CONDITIONS = {
    "runner.os == 'Linux'": False,
    "matrix.cuda != 'cpu'": False,
    "matrix.platform == 'win-64' && matrix.conda-builder == 'conda-build'": False,  # the default builder: rattler
    "always()": True,
}
GIT_REF = '--git-ref "${TORCH_REF:-v$TORCH_RELEASE}"'  # the compile; this host has no MSVC
WHEEL = '--wheel "$WHEEL"'
STAGES = ("source", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")


def job_commands() -> list[str]:
    """The `python ...` lines of the build job's steps that run for the Windows CPU cell, in order."""
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    found = []
    for step in workflow["jobs"]["build"]["steps"]:
        if "if" in step and not CONDITIONS[step["if"]]:
            continue
        found += [line.strip() for line in str(step.get("run", "")).splitlines() if line.strip().startswith("python ")]
    return found


def test_the_windows_job_of_the_workflow_is_what_this_test_runs() -> None:
    """The workflow's lines as this test takes them: install, doctor, the run (the test's one change: --wheel)."""
    commands = job_commands()
    assert commands == [
        "python -m pip install -e .",
        'python pipeline.py doctor --only "$CELL"',
        f'python pipeline.py --only "$CELL" {GIT_REF}',
    ]


def _windows(prefix: Path, path: Path) -> str:
    """The C: path of a file under the prefix's drive_c."""
    return "C:\\" + str(PureWindowsPath(path.relative_to(prefix / "drive_c")))


@dataclass(frozen=True)
class Step:
    command: str
    returncode: int | None
    output: str  # stdout then stderr, as the program wrote them in the ANSI code page


@dataclass(frozen=True)
class Job:
    prefix: Path
    project: Path
    python: Path
    steps: list[Step]
    log: Path

    def step(self, start: str) -> Step:
        return next(s for s in self.steps if s.command.startswith(start))


@pytest.fixture(scope="module")
def windows_job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    script = _script()
    found = wine.find()
    assert found is not None
    settings = script.Settings()  # Windows's defaults
    machine = tmp_path_factory.mktemp("windows-machine")
    prefix = script.machine_prefix(machine, found, CACHE, settings)
    profile = prefix / "drive_c" / "users" / script.PROFILE_USER
    python = script.installed_copy(script.prepare("3.11", CACHE), prefix / "drive_c" / "Program Files" / "Python311")
    project = profile / "Documents" / "My Projects" / "torchbuild"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (project / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, project / name)
    plan = torch_plan("win-64", "cpu", "3.11", TORCH)
    fetched = fetch(plan, CACHE, machine / "fetch.log", version=plan.torch).path
    wheel = profile / "Downloads" / "torch wheels" / fetched.name
    wheel.parent.mkdir(parents=True)
    shutil.copyfile(fetched, wheel)
    # The job's env (CELL), and the stored repodata verify solves against: conda-forge cannot be reached here.
    values = {"CELL": CELL, "WHEEL": _windows(prefix, wheel)}
    env = {"CELL": CELL, "TORCHBUILD_REPODATA": wine.windows_path(REPODATA)}
    commands = [line.replace(GIT_REF, WHEEL) for line in job_commands()]
    channel = _windows(prefix, profile / "nightly channel")
    commands.append(f'python pipeline.py publish build --channel "{channel}"')
    steps, log = [], machine / "job.log"
    for command in commands:
        args = [string.Template(arg).substitute(values) for arg in shlex.split(command)][1:]  # after `python`
        ran = script.run(python, args, CACHE, cwd=project, settings=settings, machine=machine, env=env)
        steps.append(Step(command, ran.returncode, ran.stdout + wine.without_noise(ran.stderr)))
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {command}\n{steps[-1].output}\n[exit {ran.returncode}, {ran.seconds:.0f} s]\n")
    print(log.read_text(encoding="utf-8")[-20000:])  # each stage's line, for the docs (pytest -rP shows it)
    return Job(prefix, project, python, steps, log)


def _assert_clean(step: Step) -> None:
    assert "Traceback" not in step.output, step.output[-4000:]
    assert "\ufffd" not in step.output, "a byte the ANSI code page does not have"
    assert not re.search(r"\\u[0-9a-fA-F]{4}", step.output), step.output[-4000:]


@pytest.mark.nightly
@pytest.mark.usefixtures("needs_wine")
def test_pip_installs_the_checkout_on_the_windows_machine(windows_job: Job) -> None:
    step = windows_job.step("python -m pip install -e .")
    assert step.returncode == 0, step.output[-4000:]
    assert "Successfully installed torchbuild-0.1.0" in step.output
    _assert_clean(step)


@pytest.mark.nightly
@pytest.mark.usefixtures("needs_wine")
def test_doctor_names_the_compilers_this_machine_lacks_in_the_ansi_code_page(windows_job: Job) -> None:
    step = windows_job.step("python pipeline.py doctor")
    assert step.returncode == 1, step.output[-4000:]  # no Visual Studio, cmake or ninja: the job compiles elsewhere
    assert "+ Python 3.11" in step.output and "C:\\Program Files\\Python311\\python.exe" in step.output
    assert "x MSVC" in step.output and "vswhere.exe not found" in step.output
    _assert_clean(step)


@pytest.mark.nightly
@pytest.mark.usefixtures("needs_wine")
def test_the_run_passes_every_stage_with_windows_defaults(windows_job: Job) -> None:
    step = windows_job.step('python pipeline.py --only "$CELL"')
    assert step.returncode == 0, step.output[-6000:]
    for stage in STAGES:
        assert re.search(rf"^\+ {re.escape(stage)} +passed", step.output, re.MULTILINE), stage
    assert "on this win-64 host under Wine" in step.output
    # the summary as a CI log shows it: the cell id and the version whole
    assert re.search(rf"\| {CELL} +\| {re.escape(TORCH)}\+cpu +\|", step.output), step.output[-4000:]
    assert "%LOCALAPPDATA%" not in step.output
    cache = windows_job.prefix / "drive_c" / "users" / "Zoë Ng" / "AppData" / "Local" / "torchbuild" / "Cache"
    assert cache.is_dir(), "the user's cache folder under the profile"
    _assert_clean(step)


@pytest.mark.nightly
@pytest.mark.usefixtures("needs_wine")
def test_publish_of_what_the_job_built_and_pip_installs_from_that_channel(windows_job: Job) -> None:
    step = windows_job.step("python pipeline.py publish build")
    assert step.returncode == 0, step.output[-4000:]
    _assert_clean(step)
    channel = windows_job.prefix / "drive_c" / "users" / "Zoë Ng" / "nightly channel"
    assert (channel / "win-64" / f"pytorch-{TORCH}-py3.11_cpu_0.conda").is_file()
    # the companion the run shipped too, as the run's own publish stage put it in its channel
    assert list((channel / "win-64").glob("torchvision-*.conda")), step.output[-3000:]
    assert list((channel / "whl" / "simple" / "torchvision").glob("torchvision-*.whl")), step.output[-3000:]
    printed = re.search(r"pip install (?:--pre )?--index-url (\S+) torch", step.output)
    assert printed, step.output
    index = printed.group(1)
    assert index.startswith("file:///C:/users/Zo%C3%AB%20Ng/nightly%20channel/")  # the line it printed, quoted
    script = _script()
    pip = ["-m", "pip", "install", "--index-url", index, "--extra-index-url", "https://pypi.org/simple",
           f"torch=={TORCH}+cpu"]  # fmt: skip
    home = windows_job.prefix / "drive_c" / "users" / "Zoë Ng"
    installed = script.run(windows_job.python, pip, CACHE, cwd=home, machine=windows_job.prefix.parent)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"torch-{TORCH}+cpu" in installed.stdout
    probe = "import torch; print(torch.__version__, torch.ones(2).sum().item())"
    imported = script.run(windows_job.python, ["-c", probe], CACHE, cwd=home, machine=windows_job.prefix.parent)
    assert imported.stdout.strip() == f"{TORCH}+cpu 2.0", imported.stderr[-3000:]
