"""Fault suite, local channels: concurrent publishers of one name, a full disk, a read-only channel. After each,
the channel is complete (every file an index names is there with its bytes) and, where the publish failed,
byte-for-byte what it was before, with no temporary file left and a message instead of a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.support_faults import (
    Build,
    Mount,
    outputs,
    problems,
    publish,
    publish_argv,
    small_build,
    snapshot,
    tmpfs,
)

__all__ = ["tmpfs"]  # the fixture, imported for pytest

TRIALS = 6
PADDING = 8 << 20  # copies long enough for the two publishers to overlap (without the lock, 1 trial in 3 clashed)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Build]:
    root = tmp_path_factory.mktemp("builds")
    return {
        "a": small_build(root / "a", "a", padding=PADDING),
        "b": small_build(root / "b", "b", padding=PADDING),  # the same names as a's, other bytes
        "small": small_build(root / "small", "small"),
        "small-b": small_build(root / "small-b", "small-b"),  # the same names as small's, other bytes
        "big": small_build(root / "big", "big", padding=600_000, python="3.12"),
    }


def test_concurrent_publishers_of_one_name_one_wins_whole_the_other_is_refused(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: both exited 0, and the wheel's bytes and its page's #sha256 named different builds (3 of 6 trials
    # replaced a .conda without --replace).
    for trial in range(TRIALS):
        channel = tmp_path / f"channel-{trial}"
        env = {**os.environ, "COLUMNS": "200"}
        procs = {
            name: subprocess.Popen(publish_argv(channel, *builds[name].files), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
            for name in ("a", "b")
        }
        results = {name: subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate()) for name, p in procs.items()}
        codes = sorted(r.returncode for r in results.values())
        assert codes == [0, 2], outputs(list(results.values()))
        (winner,) = [name for name, r in results.items() if r.returncode == 0]
        loser = results["b" if winner == "a" else "a"]
        assert "refusing to overwrite" in loser.stderr and "Traceback" not in loser.stderr, loser.stderr
        assert problems(channel) == [], f"trial {trial}"
        files = snapshot(channel)
        assert files[f"linux-64/{builds[winner].conda.name}"] == builds[winner].conda.read_bytes()
        assert files[f"whl/simple/torch/{builds[winner].wheel.name}"] == builds[winner].wheel.read_bytes()


def test_a_full_disk_leaves_the_channel_as_it_was_and_publishes_once_there_is_room(
    builds: dict[str, Build], tmpfs: Mount
) -> None:
    channel = tmpfs.path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    before = snapshot(channel)
    filler = tmpfs.fill(leave=200_000)  # room for some of the new package, not all of it
    failed = publish(channel, *builds["big"].files)
    assert failed.returncode == 1, outputs([failed])
    assert "No space left on device" in failed.stderr and "Traceback" not in failed.stderr, failed.stderr
    assert snapshot(channel) == before, "a failed publish changed the channel"
    assert problems(channel) == []
    filler.unlink()
    again = publish(channel, *builds["big"].files)
    assert again.returncode == 0, outputs([again])
    assert problems(channel) == [] and f"linux-64/{builds['big'].conda.name}" in snapshot(channel)


@pytest.mark.parametrize("replace", [False, True])
def test_a_read_only_channel_is_named_and_left_as_it_was(
    replace: bool, builds: dict[str, Build], tmpfs: Mount
) -> None:
    channel = tmpfs.path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    before = snapshot(channel)
    tmpfs.read_only()
    try:
        # A new package, or (with --replace) other bytes under a published name.
        new = builds["small-b"].files if replace else builds["big"].files
        failed = publish(channel, *new, replace=replace)
        assert failed.returncode == 1, outputs([failed])
        assert "Read-only file system" in failed.stderr and str(channel) in failed.stderr, failed.stderr
        assert "Traceback" not in failed.stderr
        assert snapshot(channel) == before
    finally:
        tmpfs.read_only(False)
    assert problems(channel) == []
