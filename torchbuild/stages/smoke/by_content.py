"""A wheel unpacked once per content for the smoke environments, not once per environment.

uv installs a wheel by linking its files from the copy it unpacked into a cache, and it keeps that copy by the
wheel's path (and modification time): the same repaired wheel made again by another run (``--force``, another work
directory) sits at a new path and would be unpacked again (torch: 190 MB to 700 MB, the most of a venv's making).
So the environment installs the artifact from a path named by its sha256 under the cache: a copy made the first
time, checked against the artifact's sha256 every time (a copy that changed is replaced), so what is installed is
always the artifact's bytes, and a wheel of other content (a broken build) gets a path, and an unpacking, of its own.

uv unpacks it into a cache beside that copy (``unpack_cache``), not into uv's shared one, which never drops what it
unpacked: the copy and its unpacking go together when the content is pruned (the KEEP newest used stay).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from torchbuild.results import Artifact, sha256_of

FOLDER = "smoke-wheels"
KEEP = 4  # contents kept (the newest used): torch's CPU wheel is 190 MB, 700 MB unpacked
UNPACKED = "uv-cache"


def wheel_path(artifact: Artifact, cache_dir: Path) -> Path:
    """``artifact`` (a wheel) at its content's path under ``cache_dir`` (its own path where the file no longer has
    the sha256 its stage recorded); the folders of other contents beyond the KEEP newest used are removed."""
    folder = cache_dir / FOLDER / artifact.sha256
    target = folder / artifact.path.name
    if not (target.is_file() and sha256_of(target) == artifact.sha256):
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f".{artifact.path.name}.{os.getpid()}.partial"
        shutil.copyfile(artifact.path, staged)
        if sha256_of(staged) != artifact.sha256:  # the file changed since its stage recorded it: install it as it is
            staged.unlink()
            return artifact.path
        os.replace(staged, target)
    os.utime(folder)  # used now: the newest survive _prune
    _prune(folder.parent)
    return target


def unpack_cache(wheel: Path, elsewhere: Path) -> Path:
    """Where uv unpacks ``wheel`` (a path ``wheel_path`` returned): beside its content's copy, or ``elsewhere``
    (a folder that goes with the environment) for the artifact's own path."""
    staged = wheel.parent.parent.name == FOLDER and len(wheel.parent.name) == 64
    return wheel.parent / UNPACKED if staged else elsewhere


def _prune(root: Path) -> None:
    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
