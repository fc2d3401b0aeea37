"""A long stage shows what it is doing: a line per step at once, and while it lasts a line a minute (here a tenth of
a second) with what it does and for how long, on stderr with the rest of the progress."""

from __future__ import annotations

import time

import pytest

from torchbuild.host import progress


def test_a_step_is_said_at_once_and_a_long_one_again_with_its_time(capsys: pytest.CaptureFixture[str]) -> None:
    progress.started("smoke-wheel")
    try:
        with progress.heartbeat(every=0.1):
            progress.doing("smoke-wheel", "running the checks")
            time.sleep(0.35)
    finally:
        progress.ended("smoke-wheel")
    said = capsys.readouterr()
    assert said.out == ""  # results only on stdout
    lines = said.err.splitlines()
    assert lines[0] == "  smoke-wheel: running the checks ..."
    beats = [line for line in lines[1:] if line.startswith("  smoke-wheel: running the checks (0m00s so far)")]
    assert len(beats) >= 2


def test_a_stage_that_ended_is_no_longer_said() -> None:
    progress.started("conda")
    progress.doing("conda", "assembling")
    progress.ended("conda")
    assert progress.lines(time.monotonic() + 3600, every=60) == []


def test_a_stage_shorter_than_the_interval_gets_no_heartbeat_line() -> None:
    progress.started("verify")
    try:
        now = time.monotonic()
        assert progress.lines(now, every=60) == []
        assert progress.lines(now + 125, every=60) == ["  verify: running (2m05s so far)"]
    finally:
        progress.ended("verify")
