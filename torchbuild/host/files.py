"""Writing files so that a reader sees the old file or the new one, never half of one; a set of files that
appears together (``Staged``: every file written under a temporary name first, all renamed into place last); the
digests of a tree of files (a cache entry checked before it is used)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from torchbuild.results import Artifact, sha256_of

PART = ".part"  # the suffix of a file written under a temporary name (a dot name beside its destination)


@functools.cache
def umask() -> int:
    """This process's umask. Linux shows it in /proc; elsewhere it can only be read by setting it, once, here."""
    try:
        found = re.search(r"^Umask:\s*([0-7]+)$", Path("/proc/self/status").read_text(encoding="utf-8"), re.MULTILINE)
    except OSError:
        found = None
    if found:
        return int(found.group(1), 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


def temporary_name(path: Path) -> Path:
    """A fresh temporary name beside ``path`` (``.<name>.<random>.part``); no file is made. A writer takes the name
    first, then makes the file (``make_empty``) inside the block that removes it on any exception: a signal's
    KeyboardInterrupt arriving between the two then leaves nothing behind (mkstemp's name comes back only after
    the file exists)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}{PART}")


def make_empty(path: Path) -> None:
    """Create ``path`` empty, failing if it exists, with the mode a plain ``open(path, "w")`` gives (the umask
    applied), not mkstemp's 0600, which would keep a web server or another user from reading a channel."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def changed_at(path: Path) -> int:
    """When the file's content or its directory entry last changed (nanoseconds): the later of mtime and ctime, so
    that a copy which puts an old mtime back still counts as a change (no tool sets ctime)."""
    info = path.stat()
    return max(info.st_mtime_ns, info.st_ctime_ns)


def write_atomic(path: Path, text: str) -> None:
    tmp = temporary_name(path)
    try:
        make_empty(tmp)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_atomic(src: Path, dest: Path) -> Artifact:
    """Copy ``src`` to ``dest`` atomically, hashing it in the same pass."""
    if dest.exists() and dest.resolve() == src.resolve():
        return Artifact.of(dest)
    tmp = temporary_name(dest)
    digest = hashlib.sha256()
    size = 0
    try:
        make_empty(tmp)
        with src.open("rb") as reader, tmp.open("wb") as writer:
            while block := reader.read(1 << 20):
                digest.update(block)
                writer.write(block)
                size += len(block)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Artifact(path=dest, sha256=digest.hexdigest(), size=size)


def link(src: Path, dest: Path) -> None:
    """``dest`` as a hard link to ``src`` where the file system allows it (the files linked are never modified in
    place), else a copy; atomically: ``dest`` appears whole or not at all, and a file already there is replaced,
    never rewritten in place (another stage or run reading it at that moment keeps reading whole bytes)."""
    tmp = temporary_name(dest)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.unlink(missing_ok=True)  # a rename onto a link to the same file does nothing and leaves it


def link_atomic(src: Path, dest: Path) -> Artifact:
    link(src, dest)
    return Artifact.of(dest)


def is_temporary(path: Path) -> bool:
    """A file this module writes under a temporary name (left behind only by a process that was killed)."""
    return path.name.startswith(".") and path.name.endswith(PART)


class Staged:
    """Files that appear together or not at all: each is written in full under a temporary name beside its
    destination (so the rename is atomic and needs no space); ``commit`` renames them into place in the order they
    were staged; leaving the ``with`` block without a commit (an error, a full disk, an interrupt) removes them, and
    the folders made for them. A process killed before the commit leaves only temporary names (``is_temporary``),
    never a final one."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []  # (temporary, destination)
        self._made: list[Path] = []  # folders made for destinations, removed again by abort
        self._removals: list[Path] = []  # files the commit removes after the renames

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    @property
    def destinations(self) -> list[Path]:
        return [dest for _, dest in self._pending]

    def temporary_of(self, dest: Path) -> Path:
        return next(tmp for tmp, staged_dest in self._pending if staged_dest == dest)

    def _folder_for(self, dest: Path) -> None:
        missing = [p for p in [dest.parent, *dest.parent.parents] if not p.exists()]
        for folder in reversed(missing):
            folder.mkdir()
            self._made.append(folder)

    def temporary(self, dest: Path) -> Path:
        """An empty temporary file that ``commit`` renames to ``dest``, for a writer that takes a path."""
        self._folder_for(dest)
        tmp = temporary_name(dest)
        self._pending.append((tmp, dest))  # before the file exists: abort removes it whenever an interrupt comes
        make_empty(tmp)
        return tmp

    def adopt(self, made: Path, dest: Path) -> None:
        """A file written elsewhere on ``dest``'s file system, renamed to ``dest`` by ``commit`` (removed by abort)."""
        self._folder_for(dest)
        self._pending.append((made, dest))

    def write_text(self, dest: Path, text: str) -> None:
        self.temporary(dest).write_text(text, encoding="utf-8")

    def copy(self, src: Path, dest: Path) -> Artifact:
        """``src`` staged for ``dest``, hashed in the same pass."""
        tmp = self.temporary(dest)
        digest = hashlib.sha256()
        size = 0
        with src.open("rb") as reader, tmp.open("wb") as writer:
            while block := reader.read(1 << 20):
                digest.update(block)
                writer.write(block)
                size += len(block)
        return Artifact(path=dest, sha256=digest.hexdigest(), size=size)

    def remove(self, dest: Path) -> None:
        """``dest`` is removed by ``commit``, after every staged file is in place (an index that no longer names it
        comes before it goes), and is put back where the commit fails."""
        self._removals.append(dest)

    def commit(self) -> None:
        """Rename every staged file into place, then take the removed ones away, all or nothing: where one rename
        fails (a file or folder that cannot be replaced, an interrupt), the ones done are undone (the files they
        replaced or removed put back, the new ones removed) before the error goes on; the ``with`` block's end then
        removes the rest."""
        done: list[tuple[Path, Path, Path | None]] = []  # (temporary, destination, the file it replaces, kept)
        removed: list[tuple[Path, Path]] = []  # (destination, the temporary name it was renamed to)
        try:
            for tmp, dest in self._pending:
                done.append((tmp, dest, _keep(dest)))
                os.replace(tmp, dest)
            for dest in self._removals:
                kept = temporary_name(dest)
                os.replace(dest, kept)
                removed.append((dest, kept))
        except BaseException:
            for dest, kept in reversed(removed):
                with contextlib.suppress(OSError):
                    os.replace(kept, dest)
            _undo(done)
            raise
        for _, _, replaced in done:
            if replaced is not None:
                replaced.unlink(missing_ok=True)
        for _, kept in removed:
            kept.unlink(missing_ok=True)
        self._pending.clear()
        self._made.clear()
        self._removals.clear()

    def abort(self) -> None:
        for tmp, _ in self._pending:
            tmp.unlink(missing_ok=True)
        self._pending.clear()
        self._removals.clear()
        for folder in reversed(self._made):
            with contextlib.suppress(OSError):  # not empty: something else is in it now
                folder.rmdir()
        self._made.clear()


def _keep(dest: Path) -> Path | None:
    """A second name (a hard link, else a copy) for the file at ``dest`` that a commit is about to replace."""
    if not dest.is_file():
        return None
    kept = temporary_name(dest)
    try:
        os.link(dest, kept)
    except OSError:
        shutil.copy2(dest, kept)
    return kept


def _undo(done: list[tuple[Path, Path, Path | None]]) -> None:
    """Put back what a commit's renames replaced, newest first, and remove what they added (a temporary file still
    there was not renamed: its destination is as it was)."""
    for tmp, dest, replaced in reversed(done):
        with contextlib.suppress(OSError):
            if tmp.exists():
                if replaced is not None:
                    replaced.unlink()
            elif replaced is not None:
                os.replace(replaced, dest)
            else:
                dest.unlink()


# --- a tree's digests ---------------------------------------------------------------------------------------


def tree_digests(root: Path) -> dict[str, str]:
    """Every file below ``root`` (relative POSIX path) with its sha256: what a cache entry records when it is made."""
    return {p.relative_to(root).as_posix(): sha256_of(p) for p in sorted(root.rglob("*")) if p.is_file()}


def tree_differences(root: Path, recorded: Mapping[str, str]) -> Iterator[str]:
    """The files of ``recorded`` that ``root`` no longer holds as recorded (missing, or other bytes)."""
    for relative, sha256 in recorded.items():
        path = root / relative
        if not path.is_file():
            yield f"{relative} (missing)"
        elif sha256_of(path) != sha256:
            yield f"{relative} (sha256 differs)"


def unwritable(path: Path) -> str | None:
    """Why a directory option cannot be written into, said as the end of a sentence about it: a file, or a folder
    (or, where it is still to be made, its nearest existing parent) that cannot be written; None when it can."""
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be made: {existing} is a file"
    where = "" if existing == path else f" (its parent {existing} is not writable)"
    try:
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return f"is on a read-only file system{where}"
    except (AttributeError, OSError):  # no statvfs on Windows
        pass
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written: no permission{where}"
    return None
