"""The Wine smoke's ``torchrun --help`` through the conda layout's Scripts\\torchrun.exe: what its verdict says for each
way the launcher and the script can end, and that a script the Plan records as upstream's broken one (torch 1.13.0's
torchrun on Windows: signal.SIGKILL) passes only where the launcher did its part."""

from __future__ import annotations

import pytest

from tests.builders import torch_plan
from torchbuild.stages.smoke.wine import SCRIPT, launcher_verdict

USAGE = "usage: torchrun [-h] [--nnodes NNODES] [--nproc-per-node NPROC_PER_NODE]\n"
SIGKILL_TRACEBACK = r"""Traceback (most recent call last):
  File "C:\env\lib\runpy.py", line 194, in _run_module_as_main
  File "C:\env\Scripts\torchrun.exe\__main__.py", line 4, in <module>
  File "C:\env\lib\site-packages\torch\distributed\run.py", line 386, in <module>
  File "C:\env\lib\site-packages\torch\distributed\elastic\timer\file_based_local_timer.py", line 97, in FileTimerServer
AttributeError: module 'signal' has no attribute 'SIGKILL'
"""


def _recorded(torch: str, platform: str = "win-64") -> str:
    plan = torch_plan(platform, "cpu", "3.9", torch)
    return next((rule.why for rule in plan.broken_scripts if rule.value == SCRIPT), "")


def test_torch_1_13_0s_torchrun_is_recorded_broken_on_windows_only() -> None:
    assert "signal.SIGKILL" in _recorded("1.13.0")
    assert _recorded("1.13.1") == "" and _recorded("1.12.1") == ""
    assert _recorded("1.13.0", "linux-64") == "", "Linux's Python has SIGKILL: torchrun runs there"


def test_a_launcher_that_shows_the_usage_passes() -> None:
    assert launcher_verdict(0, USAGE, "") == ("passed", "Scripts\\torchrun.exe --help: exit 0, torchrun's usage")


def test_a_failing_script_fails_unless_recorded_and_then_says_so() -> None:
    status, message = launcher_verdict(1, "", SIGKILL_TRACEBACK)
    assert status == "failed"
    assert message.startswith("Scripts\\torchrun.exe --help: exit 1\nTraceback (most recent call last):")
    assert message.endswith("AttributeError: module 'signal' has no attribute 'SIGKILL'")

    why = _recorded("1.13.0")
    status, message = launcher_verdict(1, "", SIGKILL_TRACEBACK, why)
    assert status == "passed"
    assert message == (
        "Scripts\\torchrun.exe --help: exit 1: the launcher started python.exe, and torchrun failed as upstream's "
        f"known fault, as recorded ({why}): AttributeError: module 'signal' has no attribute 'SIGKILL'"
    )


@pytest.mark.parametrize(("returncode", "output"), [
    (1, "failed to create process.\n"),  # the launcher found no python.exe: the layout's fault, not upstream's
    (None, ""),  # timed out
    (0, "Traceback (most recent call last):\n  ...\n"),  # exit 0 without the usage
])  # fmt: skip
def test_a_recorded_script_does_not_cover_a_launcher_that_failed(returncode: int | None, output: str) -> None:
    status, message = launcher_verdict(returncode, "", output, _recorded("1.13.0"))
    assert status == "failed", message
    assert message.startswith(f"Scripts\\torchrun.exe --help: {'timed out' if returncode is None else 'exit'}")


def test_a_recorded_script_that_runs_says_the_record_is_stale() -> None:
    status, message = launcher_verdict(0, USAGE, "", "why it was recorded")
    assert status == "passed"
    assert message.endswith("; recorded as upstream's broken script but runs (why it was recorded)")
