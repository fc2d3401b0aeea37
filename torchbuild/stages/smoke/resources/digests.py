"""sha256 of files and of folders' files, for the checks that are done once per content (consumer_cache.py,
compile_results.py). Standard library only; the environment's Python may be older than 3.11's hashlib.file_digest."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

CHUNK = 1 << 20


def file_digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.digest()


def tree(top: Path, by_name: Callable[[str], bool] = lambda folder: False) -> Iterator[tuple[str, bytes]]:
    """(path relative to ``top``, sha256) of every file under ``top`` in a stable order, bytecode caches left out;
    a folder for which ``by_name`` is true is yielded as "<relative>/" with an empty digest, its files not read."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        here = Path(folder)
        if here != top and by_name(here.name):
            dirs[:] = []
            yield here.relative_to(top).as_posix() + "/", b""
            continue
        for name in sorted(files):
            if not name.endswith(".pyc"):
                path = here / name
                yield path.relative_to(top).as_posix(), file_digest(path)
