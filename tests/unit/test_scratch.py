"""Scratch space: in memory (/dev/shm) where it is a tmpfs with room, on disk otherwise, gone afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchbuild import scratch


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


def test_a_directory_that_is_no_tmpfs_mount_is_not_memory(tmp_path: Path) -> None:
    assert scratch.in_memory(1, ram=tmp_path) is None  # a plain folder on this disk
