"""Writing files so that a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from torchbuild.results import Artifact


@functools.cache
def umask() -> int:
    """This process's umask. Linux shows it in /proc; elsewhere it can only be read by setting it, once, here."""
    try:
        found = re.search(r"^Umask:\s*([0-7]+)$", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        found = None
    if found:
        return int(found.group(1), 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


def _temporary_beside(path: Path) -> Path:
    """An empty temporary file in ``path``'s directory, with the mode a plain ``open(path, "w")`` would give
    (mkstemp makes it 0600, which would keep a web server or another user from reading a channel)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~umask())
    return Path(tmp)


def changed_at(path: Path) -> int:
    """When the file's content or its directory entry last changed (nanoseconds): the later of mtime and ctime, so
    that a copy which puts an old mtime back still counts as a change (no tool sets ctime)."""
    info = path.stat()
    return max(info.st_mtime_ns, info.st_ctime_ns)


def write_atomic(path: Path, text: str) -> None:
    tmp = _temporary_beside(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_atomic(src: Path, dest: Path) -> Artifact:
    """Copy ``src`` to ``dest`` atomically, hashing it in the same pass."""
    if dest.exists() and dest.resolve() == src.resolve():
        return Artifact.of(dest)
    tmp = _temporary_beside(dest)
    digest = hashlib.sha256()
    size = 0
    try:
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
    """A hard link where the file system allows it (the files linked are never modified in place), else a copy."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def link_atomic(src: Path, dest: Path) -> Artifact:
    tmp = _temporary_beside(dest)
    tmp.unlink()
    link(src, tmp)
    os.replace(tmp, dest)
    return Artifact.of(dest)
