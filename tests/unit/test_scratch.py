"""Scratch space: in memory (/dev/shm) where it is a tmpfs with room, on disk otherwise, gone afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.errors import UserError
from torchbuild.host import scratch


def test_scratch_is_in_memory_where_dev_shm_has_room_and_is_removed_after(tmp_path: Path) -> None:
    if scratch.in_memory(1 << 20) is None:
        pytest.skip("skipped: /dev/shm here is no tmpfs with 2 GiB to spare")
    with scratch.directory(1 << 20, tmp_path / "disk", "payload-") as path:
        assert path.parent == scratch.RAM_DIR and path.name.startswith("payload-")
        assert scratch.in_memory_path(path)
        (path / "torch").mkdir()
        (path / "torch" / "__init__.py").write_text("")
    assert not path.exists()
    assert not (tmp_path / "disk").exists()


def test_scratch_too_big_for_memory_is_on_disk_and_removed_when_the_stage_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="assembly failed"), scratch.directory(1 << 60, tmp_path, "payload-") as path:
        assert path.parent == tmp_path and not scratch.in_memory_path(path)
        (path / "member").write_bytes(b"x")
        raise RuntimeError("assembly failed")
    assert not path.exists()


def test_torchbuild_scratch_disk_keeps_it_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scratch.SETTING, "disk")
    assert scratch.in_memory(1) is None
    with scratch.directory(1, tmp_path, "payload-") as path:
        assert path.parent == tmp_path


def test_an_unknown_setting_is_refused_naming_the_valid_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scratch.SETTING, "ram")
    with pytest.raises(UserError) as caught, scratch.directory(1, tmp_path, "payload-"):
        pass
    assert str(caught.value) == "TORCHBUILD_SCRATCH='ram' is not a scratch setting: use auto or disk."
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_a_directory_that_is_no_tmpfs_mount_is_not_memory(tmp_path: Path) -> None:
    assert scratch.in_memory(1, ram=tmp_path) is None  # a plain folder on this disk


def test_an_in_memory_conda_prefix_a_failed_run_kept_is_removed_by_the_next_run(tmp_path: Path) -> None:
    from tests.builders import make_wheel, torch_plan
    from torchbuild.stages.smoke import stage as smoke
    from torchbuild.stages.smoke.venv import VenvBackend

    plan = torch_plan()
    package = make_wheel(tmp_path / "in", plan.root.wheel)  # any file: only its size counts here
    backend = VenvBackend(plan, "python3", package)
    base = tmp_path / "smoke-conda"
    base.mkdir()
    first = smoke._environment_root(base, "conda", backend, package)
    if not scratch.in_memory_path(first):
        pytest.skip("skipped: /dev/shm here is no tmpfs with room; the prefix is made on disk")
    (first / "venv").mkdir()  # the run fails: the environment stays, recorded in the stage directory
    assert (base / smoke.KEPT).read_text().strip() == str(first)
    second = smoke._environment_root(base, "conda", backend, package)
    assert not first.exists() and second != first and scratch.in_memory_path(second)
    shutil.rmtree(second)
    wheel_base = tmp_path / "smoke-wheel"
    wheel_base.mkdir()
    assert smoke._environment_root(wheel_base, "wheel", backend, package) == wheel_base / "wheel"  # on disk


def _made_by_a_process_that_ended(prefix: str, keep_while: Path | None = None) -> Path:
    """A directory in memory made by another process that has ended (as a killed or finished run leaves it)."""
    code = ("import sys; from pathlib import Path; from torchbuild.host import scratch; "
            "keep = Path(sys.argv[2]) if sys.argv[2] else None; "
            "print(scratch.make_in_memory(1, sys.argv[1], keep_while=keep))")  # fmt: skip
    made = subprocess.run([sys.executable, "-c", code, prefix, str(keep_while or "")], capture_output=True,
                          text=True, check=True, cwd=ROOT)  # fmt: skip
    return Path(made.stdout.strip())


def test_memory_scratch_left_by_ended_runs_goes_unless_a_record_still_keeps_it(tmp_path: Path) -> None:
    if not scratch.in_memory(1):
        pytest.skip("skipped: /dev/shm here is no tmpfs with room")
    record = tmp_path / "build" / "cell" / "smoke-conda" / "kept"
    record.parent.mkdir(parents=True)
    killed = _made_by_a_process_that_ended("torchbuild-test-killed-")
    kept = _made_by_a_process_that_ended("torchbuild-test-kept-", keep_while=record)
    orphaned = _made_by_a_process_that_ended("torchbuild-test-orphaned-", keep_while=tmp_path / "gone" / "kept")
    record.write_text(f"{kept}\n")  # the failed stage's record names its environment, kept for debugging
    try:
        removed = scratch.remove_leftovers()
        assert killed in removed and orphaned in removed and kept not in removed
        assert not killed.exists() and not orphaned.exists() and kept.is_dir()
        shutil.rmtree(record.parents[2])  # the build directory deleted: nothing keeps it any more
        assert kept in scratch.remove_leftovers() and not kept.exists()
    finally:
        for path in (killed, kept, orphaned):
            scratch.remove(path)


def test_no_memory_scratch_once_the_process_is_stopping(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stage thread still running after an interrupt removed this process's scratch would make a directory that
    # outlives the process.
    if not scratch.in_memory(1):
        pytest.skip("skipped: /dev/shm here is no tmpfs with room")
    monkeypatch.setattr(scratch, "_stopping", False)
    before = set(scratch.RAM_DIR.glob("torchbuild-test-stop-*"))
    scratch.remove_own()
    with pytest.raises(scratch.Stopping):
        scratch.make_in_memory(1, "torchbuild-test-stop-")
    assert set(scratch.RAM_DIR.glob("torchbuild-test-stop-*")) == before


def test_scratch_a_stage_thread_writes_again_after_an_interrupt_is_gone_when_the_process_ends() -> None:
    # The fault suite's smoke-conda interrupt once left its conda prefix behind: py-rattler's installer, in a stage
    # thread of the same process, created the directory again after remove_own had removed it.
    if not scratch.in_memory(1):
        pytest.skip("skipped: /dev/shm here is no tmpfs with room")
    code = """
import sys, threading
from torchbuild.host import scratch
path = scratch.make_in_memory(1, "torchbuild-test-rewritten-")
print(path, flush=True)
removed = threading.Event()
def installer():
    removed.wait()
    (path / "pkgs").mkdir(parents=True)
    (path / "pkgs" / "torch.py").write_text("")
threading.Thread(target=installer).start()
scratch.remove_own()
removed.set()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    path = Path(done.stdout.strip())
    assert path.name.startswith("torchbuild-test-rewritten-")
    assert not path.exists(), f"{path} outlived the process that was stopping"
    assert not scratch._mark(path).exists()


def test_an_unmarked_directory_of_an_earlier_version_goes_only_once_untouched_for_a_day(tmp_path: Path) -> None:
    # Earlier versions made torchbuild-smoke-* without a mark or a lock: a run of one may still be using it (another
    # checkout on the same host), so a fresh one stays; one untouched for a day is a killed run's.
    if sys.platform != "linux":
        pytest.skip("skipped: scratch in memory is Linux's /dev/shm")
    fresh = tmp_path / f"{scratch.LEGACY}conda-fresh"
    stale = tmp_path / f"{scratch.LEGACY}conda-stale"
    for path in (fresh, stale):
        (path / "lib").mkdir(parents=True)
    day_ago = time.time() - scratch.LEGACY_AGE - 60
    os.utime(stale, (day_ago, day_ago))
    assert scratch.remove_leftovers(ram=tmp_path) == [stale]
    assert fresh.is_dir() and not stale.exists()
