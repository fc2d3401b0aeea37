"""Fault suite: a damaged entry in the download cache (a truncated wheel under its sha256, as a full disk or a
killed copy leaves) is found before use, named, removed and downloaded again; the run does not fail on it. A small
wheel named as the Plan's torch wheel stands in for torch: the fault is the cache's, not the wheel's."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.integration.support_source_repair import Index, http_index, use_only_index
from torchbuild.config.options import RunOptions
from torchbuild.stages import Context, source

__all__ = ["http_index"]  # the fixture, imported for pytest

PLAN = torch_plan()


def _source(root: Path, cache: Path) -> source.StageResult:
    return source.run(Context(plan=PLAN, root=root, options=RunOptions(cache_dir=cache), inputs={}))


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


@pytest.mark.parametrize("damage", ["truncated", "emptied", "one byte changed"])
def test_a_damaged_cache_entry_is_named_removed_and_downloaded_again(
    damage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_index: Index, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = make_wheel(tmp_path / "dist", PLAN.root.wheel, {"torch/__init__.py": b"x = 1\n" * 5000})
    good = wheel.read_bytes()
    sha = hashlib.sha256(good).hexdigest()
    http_index.add(wheel)
    use_only_index(monkeypatch, http_index)
    cache = tmp_path / "cache"
    _source(tmp_path / "ws1", cache)
    entry = cache / "wheels" / sha / PLAN.root.wheel
    assert entry.read_bytes() == good and http_index.count(".whl") == 1

    bad = {"truncated": good[: len(good) // 2], "emptied": b"", "one byte changed": _flip(good, len(good) // 3)}[damage]
    entry.unlink()  # the workspace's copy is a hard link of the entry: damage the entry alone
    entry.write_bytes(bad)
    capsys.readouterr()
    second = _source(tmp_path / "ws2", cache)
    out = capsys.readouterr().err.replace("\n", "")
    assert f"cache entry {entry} is damaged" in out and "downloaded again" in out
    assert http_index.count(".whl") == 2, "the damaged entry was not downloaded again"
    assert second.status == "passed" and second.outputs["source_wheel"].sha256 == sha
    assert entry.read_bytes() == good, "the cache entry was not replaced by the good file"

    third = _source(tmp_path / "ws3", cache)  # the repaired entry is used as before: no third download
    assert http_index.count(".whl") == 2 and third.outputs["source_wheel"].sha256 == sha
