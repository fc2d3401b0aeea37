"""Fault suite, local channels: concurrent publishers of one name, a full disk, a read-only channel. After each,
the channel is complete (every file an index names is there with its bytes) and, where the publish failed,
byte-for-byte what it was before, with no temporary file left and a message instead of a traceback."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Scratch
from tests.integration.support_faults import (
    WHEEL,
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
INDEXES = ("repodata.json", "repodata.json.zst", "index.html")  # rewritten by every publish that adds a file
PADDING = 8 << 20  # copies long enough for the two publishers to overlap (without the lock, 1 trial in 3 clashed)


@pytest.fixture(scope="module")
def builds(module_scratch: Scratch) -> dict[str, Build]:
    root = module_scratch("builds")
    return {
        "a": small_build(root / "a", "a", padding=PADDING),
        "b": small_build(root / "b", "b", padding=PADDING),  # the same names as a's, other bytes
        "small": small_build(root / "small", "small"),
        "small-b": small_build(root / "small-b", "small-b"),  # the same names as small's, other bytes
        "big": small_build(root / "big", "big", padding=600_000, python="3.12"),
        "huge": small_build(root / "huge", "huge", padding=8 << 20, python="3.10"),
    }


def test_concurrent_publishers_of_one_name_one_wins_whole_the_other_is_refused(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: both exited 0, and the wheel's bytes and its page's #sha256 named different builds (3 of 6 trials
    # replaced a .conda without --replace).
    for trial in range(TRIALS):
        channel = tmp_path / f"channel-{trial}"
        env = {**os.environ, "COLUMNS": "200"}
        argv = {name: publish_argv(channel, *builds[name].files) for name in ("a", "b")}
        procs = {name: subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for name, args in argv.items()}  # fmt: skip
        results = {name: subprocess.CompletedProcess(p.args, p.wait(120), *p.communicate())
                   for name, p in procs.items()}  # fmt: skip
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


def _truncated_inner(package: Path, dest: Path) -> Path:
    """``package`` with its inner pkg-*.tar.zst cut in half: the zip is whole, the payload is not."""
    with zipfile.ZipFile(package) as source, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as out:
        for info in source.infolist():
            data = source.read(info)
            out.writestr(info, data[: len(data) // 2] if info.filename.startswith("pkg-") else data)
    return dest


@pytest.mark.parametrize(
    ("where", "make", "message"),
    [
        ("linux-64/pytorch-2.13.0-py3.12_cpu_0.conda", lambda b, d: _truncated_inner(b["big"].conda, d),
         "is not a valid conda package"),
        ("whl/simple/torch/" + WHEEL.replace("cp311-cp311", "cp312-cp312"), lambda b, d: d.write_text("text"),
         "is not a valid wheel"),
        ("noarch/pytorch-2.13.0-py3.11_cpu_0.conda", lambda b, d: shutil.copy(b["small"].conda, d),
         "its info/index.json says subdir linux-64, so it belongs in linux-64/, not noarch/"),
        ("osx-arm64/pytorch-2.13.0-py3.11_cpu_0.conda", lambda b, d: shutil.copy(b["small"].conda, d),
         "says subdir linux-64, so it belongs in linux-64/, not osx-arm64/"),
        ("whl/simple/numpy/" + WHEEL, lambda b, d: shutil.copy(b["small"].wheel, d),
         "a wheel of the project 'torch' belongs on the page whl/simple/torch/, not on numpy's"),
    ],
)  # fmt: skip
def test_index_refuses_what_publish_refuses_and_leaves_the_channel(
    where: str, make: Any, message: str, builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: index listed each of these (repodata naming a corrupt file's hash, a text file as a wheel, a package
    # where no installer of its platform looks, a torch wheel on numpy's page).
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    dropped = channel / where
    dropped.parent.mkdir(parents=True, exist_ok=True)
    make(builds, dropped)
    before = snapshot(channel)
    argv = [sys.executable, str(ROOT / "pipeline.py"), "index", "--channel", str(channel)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 2 and "Traceback" not in result.stderr, outputs([result])
    text = " ".join(result.stderr.split())
    assert str(dropped) in text and message in text, text
    assert snapshot(channel) == before, "a refused index changed the channel"


# From before the first write to after the last, on a 2-core runner (SIGINT takes SIGTERM's way: one point).
KILL_AFTER_S = {signal.SIGTERM: (0.6, 1.5, 2.5), signal.SIGINT: (1.5,), signal.SIGKILL: (1.2, 2.2)}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_publish_killed_anywhere_leaves_the_channel_as_it_was_or_complete(
    signum: signal.Signals, builds: dict[str, Build], tmp_path: Path
) -> None:
    # SIGTERM and SIGINT: the publisher cleans up. SIGKILL: nothing can; the next publish removes what it left.
    huge = builds["huge"]
    for after in KILL_AFTER_S[signum]:
        channel = tmp_path / f"channel-{after}"
        assert publish(channel, *builds["small"].files).returncode == 0
        before = snapshot(channel)
        proc = subprocess.Popen(publish_argv(channel, *huge.files), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        time.sleep(after)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
        if signum != signal.SIGKILL:
            assert "Traceback" not in err, err
            assert problems(channel) == [], f"stopped after {after} s"
            now = snapshot(channel)
            published = now.get(f"linux-64/{huge.conda.name}") == huge.conda.read_bytes()
            assert now == before or published, f"stopped after {after} s: neither as it was nor complete"
        again = publish(channel, *huge.files)
        assert again.returncode == 0, outputs([again])
        assert problems(channel) == [], f"after a publish stopped at {after} s and one more"
        now = snapshot(channel)
        assert {k: now[k] for k in before if not k.endswith(INDEXES)} == {
            k: v for k, v in before.items() if not k.endswith(INDEXES)
        }, "a published file changed"
