"""Scratch space: in memory (/dev/shm) where it is a tmpfs with room, on disk otherwise, gone afterwards."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

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
    package = make_wheel(tmp_path / "in", plan.wheel)  # any file: only its size counts here
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
