"""Fault suite, what a local channel trusts: a folder that is not a channel (refused before anything is written,
nothing of its own deleted), files read back from a channel (a sidecar that is not the wheel's hash, a damaged
repodata.json.zst: checked against the bytes they describe, or rebuilt), a commit that fails half way (undone),
a channel path with '..', and a killed index's py-rattler child (ends with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Scratch
from tests.integration.support_faults import (
    WHEEL,
    Build,
    alive,
    children_of,
    index,
    index_argv,
    listing,
    outputs,
    problems,
    publish,
    sha256,
    small_build,
    snapshot,
)
from torchbuild.channels import pep503
from torchbuild.channels.local_layout import LOCK, MARKER

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

PAGE = "whl/simple/torch/index.html"
KILLED_WITHIN_S = 0.1  # a death signal takes milliseconds; the child, caught as it starts, would run 0.25 s or more
SIDECAR = f"whl/simple/torch/{WHEEL}.sha256"


@pytest.fixture(scope="module")
def builds(module_scratch: Scratch) -> dict[str, Build]:
    root = module_scratch("builds")
    return {
        "small": small_build(root / "small", "small"),
        "other": small_build(root / "other", "other", python="3.12"),  # other names than small's
    }


def _home(tmp_path: Path) -> Path:
    """A home folder: a user's files, among them a '.tmp' folder and '.*.part' files (a browser's downloads)."""
    home = tmp_path / "home"
    (home / ".tmp").mkdir(parents=True)
    (home / ".tmp" / "session").write_text("work in progress")
    (home / "Downloads").mkdir()
    (home / "Downloads" / ".video.mp4.part").write_bytes(b"half a download")
    (home / ".notes.part").write_text("mine")
    (home / "notes.txt").write_text("mine too")
    return home


@pytest.mark.parametrize("command", ["index", "publish"])
def test_a_folder_that_is_not_a_channel_is_refused_and_nothing_in_it_is_touched(
    command: str, builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: exit 0, the '.tmp' folder and the '.*.part' files deleted as a killed publisher's leftovers.
    home = _home(tmp_path)
    before = listing(home)
    result = index(home) if command == "index" else publish(home, *builds["small"].files)
    assert result.returncode == 2 and "Traceback" not in result.stderr, outputs([result])
    text = " ".join(result.stderr.split())
    assert f"{home} is not a channel" in text and "nothing was written" in text and "--channel" in text, text
    assert listing(home) == before, "a refused command changed the folder (or left its lock in it)"


def test_a_channel_an_earlier_version_wrote_is_still_one_and_gets_the_marker(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    assert (channel / MARKER).is_file()
    (channel / MARKER).unlink()  # as an earlier torchbuild left it: repodata.json and whl/simple, no marker
    (channel / "README.txt").write_text("the team's channel")  # and a file of its owner's
    again = publish(channel, *builds["other"].files)
    assert again.returncode == 0, outputs([again])
    assert (channel / MARKER).is_file() and (channel / "README.txt").is_file()
    assert index(channel).returncode == 0 and problems(channel) == []
    # A folder whose first publish was killed (its lock, staging and an empty subdir) is one too.
    killed = tmp_path / "killed"
    (killed / ".staging-x1" / ".tmp").mkdir(parents=True)
    (killed / "linux-64").mkdir()
    (killed / LOCK).touch()
    assert publish(killed, *builds["small"].files).returncode == 0
    assert problems(killed) == [] and not (killed / ".staging-x1").exists()


def test_cleanup_removes_only_the_temporaries_the_pipeline_names(builds: dict[str, Build], tmp_path: Path) -> None:
    # Before: index deleted every '.tmp' folder and '.*.part' file in the channel's folders.
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    (channel / ".tmp").mkdir()
    (channel / ".tmp" / "owner-notes").write_text("kept")
    (channel / "linux-64" / ".mirror-sync.part").write_text("another tool's")
    leftover = channel / "linux-64" / f".{builds['small'].conda.name}.0123456789ab.part"  # a killed publisher's
    leftover.write_bytes(b"half a package")
    assert index(channel).returncode == 0
    assert (channel / ".tmp" / "owner-notes").read_text() == "kept"
    assert (channel / "linux-64" / ".mirror-sync.part").read_text() == "another tool's"
    assert not leftover.exists()


@pytest.mark.parametrize("text", ['"><script>alert(1)</script>', "0" * 64])
def test_index_links_a_wheel_by_its_own_hash_whatever_its_sidecar_says(
    text: str, builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: the sidecar's text went into the page's href (pip: "THESE PACKAGES DO NOT MATCH THE HASHES").
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    (channel / SIDECAR).write_text(text + "\n")
    result = index(channel)
    assert result.returncode == 0, outputs([result])
    digest = snapshot(channel)
    real = pep503.wheel_links(digest[PAGE].decode())[WHEEL]
    assert real == sha256(builds["small"].wheel.read_bytes()) and "<script>" not in digest[PAGE].decode()
    assert digest[SIDECAR].decode().strip() == real, "the sidecar was left wrong"
    assert problems(channel) == []
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--index-url",
                          (channel / "whl" / "simple").as_uri(), "--platform", "manylinux_2_28_x86_64",
                          "--python-version", "3.11", "-d", str(tmp_path / "got"), "torch==2.13.0+cpu"],
                         capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr


def test_a_damaged_repodata_zst_is_rebuilt_by_the_next_publish(builds: dict[str, Build], tmp_path: Path) -> None:
    # Before: the publish said 'unchanged' and left the .zst (what conda clients fetch first) damaged.
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    packed = channel / "linux-64" / "repodata.json.zst"
    packed.write_bytes(packed.read_bytes()[:20])
    again = publish(channel, *builds["small"].files)
    assert again.returncode == 0 and "unchanged" in again.stdout, outputs([again])
    assert zstd.decompress(packed.read_bytes()) == (channel / "linux-64" / "repodata.json").read_bytes()


def test_a_publish_whose_index_cannot_be_replaced_takes_back_what_it_moved_in(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: exit 1, and the new package and wheel were left in the channel, named by no index.
    if os.geteuid() != 0:
        pytest.skip("skipped: a bind mount (a file that cannot be replaced) needs root")
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files).returncode == 0
    before = snapshot(channel)
    index_file = channel / "linux-64" / "repodata.json"
    made = subprocess.run(["mount", "--bind", str(index_file), str(index_file)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"skipped: no bind mount here ({made.stderr.strip()})")
    try:
        failed = publish(channel, *builds["other"].files)  # a rename onto a mount point fails (EBUSY)
    finally:
        subprocess.run(["umount", str(index_file)], check=True)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, outputs([failed])
    assert str(index_file) in " ".join(failed.stderr.split()), failed.stderr
    assert snapshot(channel) == before, "a failed publish changed the channel"
    assert problems(channel) == []


def test_a_channel_path_through_a_missing_folder_makes_only_the_channel(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: 'missing' was made too, and left behind empty.
    result = publish(f"{tmp_path}/missing/../channel", *builds["small"].files)
    assert result.returncode == 0, outputs([result])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["channel"]
    assert problems(tmp_path / "channel") == []


def _rattler_child(parent: int, timeout: float = 120) -> int:
    """The py-rattler process index started: the tool its launcher (host/orphans.py, the parent's child) runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for launcher in children_of(parent):
            for pid, cmdline in children_of(launcher).items():
                if cmdline.startswith(f"{sys.executable} -m torchbuild.conda.rattler_child"):
                    return pid
        time.sleep(0.002)
    raise AssertionError(f"no py-rattler process below {parent} in {timeout} s")


def test_an_index_killed_with_sigkill_takes_its_py_rattler_child_with_it(
    builds: dict[str, Build], tmp_path: Path
) -> None:
    # Before: the child ran on, writing into the staging folder the next index had removed (.staging-*/.tmp left).
    channel = tmp_path / "channel"
    assert publish(channel, *builds["small"].files, *builds["other"].files).returncode == 0
    for trial in range(4):
        proc = subprocess.Popen(index_argv(channel), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        child = _rattler_child(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        deadline = time.monotonic() + KILLED_WITHIN_S
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not alive(child), f"trial {trial}: the py-rattler child outlived the index"
        again = index(channel)  # the dead index's lock is free: no wait
        assert again.returncode == 0, outputs([again])
        time.sleep(1)
        assert problems(channel) == [], f"trial {trial}"
