"""Fault suite, a pipeline killed outright (kill -9: an out-of-memory kill, a CI runner's cancel) while a Wine smoke's
checks run: nothing of the run is left running 5 s later (the session's wineserver, Wine's services, the
embeddable CPython's check processes), and the next session in the same folder runs.

The "pipeline" is the smoke's Wine backend as the stage drives it (setup, then run_checks), in a process of its own;
the torch it checks is a stand-in wheel whose import waits while a file exists, so that the kill lands while the
check processes run (the faults are the pipeline's, not torch's)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.support_faults import left_running, processes_of
from torchbuild.platforms.windows import wine

DRIVER = """\
import sys
from pathlib import Path
from tests.builders import make_wheel, torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.platforms.windows import environments, python_embed, wine
from torchbuild.stages.smoke.env import Env
from torchbuild.stages.smoke.wine import WineBackend, prefix
from torchbuild.wheel.install import install_wheel

work, hold, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
cache = RunOptions().cache_dir
embedded = python_embed.provision(plan.windows.embeddable, cache)
init = f"import os, time\\nwhile os.path.exists({hold!r}):\\n    time.sleep(0.1)\\n__version__ = '2.14.1+cpu'\\n"
torch = make_wheel(work / "in", "torch-2.14.1+cpu-cp311-cp311-win_amd64.whl", {"torch/__init__.py": init.encode()})
backend = WineBackend(plan, wine.find(), embedded, torch, cache, work)
env = Env("wheel", work / "wheel", torch, work / "log.txt")
env.fresh()
environments.python_env(embedded, prefix(env))
install_wheel(torch, plan.conda.install_scheme, prefix(env), windows=True)
try:
    if mode == "checks":
        print(len(backend.run_checks(env)), "checks", flush=True)
    else:
        ran = backend.session().run([prefix(env) / "python.exe", "-c", "print('runs again')"], timeout=300)
        print(ran.stdout.strip(), flush=True)
finally:
    backend.close()
"""


def _driver(work: Path, hold: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(work), wine.windows_path(hold), mode], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_a_pipeline_killed_during_a_wine_smoke_leaves_nothing_running(tmp_path: Path) -> None:
    # Before: the wineserver of the stage's prefix, its services (winedevice.exe spinning) and the check processes
    # ran on after the pipeline was killed.
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    work, hold = tmp_path / "work", tmp_path / "hold"
    hold.touch()
    killed = _driver(work, hold, "checks")
    deadline = time.monotonic() + 600
    while not any("--child" in cmd for cmd in processes_of(str(tmp_path)).values()):
        assert killed.poll() is None, killed.communicate()[0]
        assert time.monotonic() < deadline, "no check process ran under Wine in 600 s"
        time.sleep(0.2)
    killed.kill()
    killed.communicate()
    left = left_running(str(tmp_path), within_s=5.0)
    hold.unlink()
    assert left == {}
    again = _driver(work, hold, "again")
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0 and output.splitlines()[-1] == "runs again", output
