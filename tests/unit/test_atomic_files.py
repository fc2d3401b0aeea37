"""Files written under a temporary name: a stop (SIGTERM/SIGINT/SIGHUP become KeyboardInterrupt in the main thread,
host/signals.py) at any point leaves neither a final name half-written nor a temporary file behind. Found by the
fault suite in CI: SIGTERM at the source stage left `.torch-...whl.<random>.part` in the stage folder, because
mkstemp made the file before the cleanup block began. The interrupt is delivered here exactly where that window
was: right after the temporary file is made."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from torchbuild.host import files


def _interrupt_once_made(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """make_empty makes the file, then the interrupt arrives (as a signal would, between two bytecodes)."""
    made: list[Path] = []
    real = files.make_empty

    def make_then_stop(path: Path) -> None:
        real(path)
        made.append(path)
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "make_empty", make_then_stop)
    return made


def _staged_copy(src: Path, dest: Path) -> None:
    with files.Staged() as staged:
        staged.copy(src, dest)
        staged.commit()


WRITERS: dict[str, Callable[[Path, Path], object]] = {
    "write_atomic": lambda src, dest: files.write_atomic(dest, "text"),
    "copy_atomic": files.copy_atomic,
    "Staged.copy": _staged_copy,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_an_interrupt_just_after_the_temporary_file_is_made_leaves_nothing(
    writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src.whl"
    src.write_bytes(os.urandom(1 << 16))
    out = tmp_path / "out"
    out.mkdir()
    made = _interrupt_once_made(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        WRITERS[writer](src, out / "torch.whl")
    assert made and made[0].name.startswith(".torch.whl.") and made[0].name.endswith(files.PART)
    assert sorted(p.name for p in out.iterdir()) == []


def test_link_atomic_interrupted_between_link_and_rename_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src.whl"
    src.write_bytes(b"wheel")
    out = tmp_path / "out"
    out.mkdir()

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", stop)
    with pytest.raises(KeyboardInterrupt):
        files.link_atomic(src, out / "torch.whl")
    assert list(out.iterdir()) == []


def test_a_link_copied_across_file_systems_and_interrupted_leaves_no_half_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # where the cache and the source are on two file systems, link copies; before, a copy stopped half way stayed
    # under its final name, a cache entry every later run took as it was (a wheel cut short)
    src = tmp_path / "src.whl"
    src.write_bytes(os.urandom(1 << 20))
    out = tmp_path / "out"
    out.mkdir()

    def other_device(*_: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    def copy_half_then_stop(source: Path, target: Path) -> None:
        Path(target).write_bytes(Path(source).read_bytes()[: 1 << 19])
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "link", other_device)
    monkeypatch.setattr(files.shutil, "copyfile", copy_half_then_stop)
    with pytest.raises(KeyboardInterrupt):
        files.link(src, out / "torch.whl")
    assert list(out.iterdir()) == []


def test_a_link_over_a_file_being_read_replaces_it_and_the_reader_keeps_whole_bytes(tmp_path: Path) -> None:
    # two stages fetching one dependency into one cache folder at once: the second replaces the first's file
    first, second = tmp_path / "a.whl", tmp_path / "b.whl"
    first.write_bytes(b"A" * 4096)
    second.write_bytes(b"B" * 4096)
    dest = tmp_path / "cache" / "dep.whl"
    dest.parent.mkdir()
    files.link(first, dest)
    with dest.open("rb") as reader:
        files.link(second, dest)
        assert reader.read() == b"A" * 4096  # before, the copy over it rewrote these bytes in place
    assert dest.read_bytes() == b"B" * 4096
    files.link(second, dest)  # linking the same file again leaves no temporary name
    assert sorted(p.name for p in dest.parent.iterdir()) == ["dep.whl"]


def test_a_temporary_file_gets_the_mode_a_plain_open_gives(tmp_path: Path) -> None:
    dest = tmp_path / "index.html"
    files.write_atomic(dest, "<html></html>")
    plain = tmp_path / "plain.html"
    plain.write_text("x")
    assert dest.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    assert [p.name for p in tmp_path.iterdir() if files.is_temporary(p)] == []


def test_a_commit_that_fails_half_way_puts_every_file_back(tmp_path: Path) -> None:
    # Before: the files renamed before the failing one stayed (a publish's package, named by no index).
    (tmp_path / "index.json").write_text("old index")
    blocked = tmp_path / "page.html"
    blocked.mkdir()  # a rename onto a folder that is not empty fails
    (blocked / "inside").write_text("x")
    with files.Staged() as staged:
        staged.write_text(tmp_path / "sub" / "package", "new package")
        staged.write_text(tmp_path / "index.json", "new index")
        staged.write_text(blocked, "new page")
        with pytest.raises(OSError):
            staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "page.html"]
    assert (tmp_path / "index.json").read_text() == "old index"
    assert [p.name for p in blocked.iterdir()] == ["inside"]


def test_a_commit_removes_its_removed_files_after_the_renames_and_puts_them_back_when_it_fails(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text("old index")
    (tmp_path / "old.whl").write_text("old wheel")
    with files.Staged() as staged:
        staged.write_text(tmp_path / "index.json", "new index")
        staged.remove(tmp_path / "old.whl")
        staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json"]
    assert (tmp_path / "index.json").read_text() == "new index"
    # A removal that fails (its file gone meanwhile) puts back what the commit had already removed and replaced.
    (tmp_path / "a.whl").write_text("a")
    with files.Staged() as staged:
        staged.write_text(tmp_path / "index.json", "newer index")
        staged.remove(tmp_path / "a.whl")
        staged.remove(tmp_path / "missing.whl")
        with pytest.raises(OSError):
            staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.whl", "index.json"]
    assert (tmp_path / "a.whl").read_text() == "a"
    assert (tmp_path / "index.json").read_text() == "new index"
