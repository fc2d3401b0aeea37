"""A wheel's license files in a conda package: conda keeps a package's licenses in ``info/licenses/``, as conda-build
does (``about/license_file``, relative paths kept), not in the installed ``.dist-info``.

From torch 2.13 a wheel carries its PEP 639 license tree, ``<dist>.dist-info/licenses/third_party/...``, with members
up to 171 characters: in conda's package cache (``C:\\Users\\<user>\\miniconda3\\pkgs\\<dist>\\Lib\\site-packages\\``)
they pass Windows' MAX_PATH, and upstream's users hit WinError 206 with them. In ``info/licenses/`` the same tree is
some 60 characters shorter. This module takes that tree out of a staged prefix (``take``) and makes the installed
metadata say so: RECORD no longer lists the moved files, METADATA no longer names them in ``License-File`` (the
core metadata spec requires each to be in ``.dist-info/licenses/``), and RECORD's line of METADATA has its new hash,
so that pip (show, uninstall) and importlib.metadata find exactly what is there. The project's own top-level license
files of older wheels (``.dist-info/LICENSE``, ``NOTICE``) stay where they are and are copied to ``info/licenses/``
as well.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.wheel.wheelfile import record_hash

TOP_LEVEL = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)(\.[A-Za-z0-9]+)?$", re.IGNORECASE)
LICENSE_FILE = "license-file"


@dataclass(frozen=True)
class Licenses:
    """The license files for the package's ``info/licenses/``: ``root/<relative path>`` for each of ``files``."""

    root: Path
    files: tuple[str, ...]  # relative to info/licenses/, '/'-separated
    moved: int  # how many came out of the dist-info's licenses/ (the rest are copies of top-level files)
    dropped_fields: int  # License-File fields taken out of METADATA

    def paths(self) -> dict[str, Path]:
        return {name: self.root / name for name in self.files}

    def top_level(self) -> list[Path]:
        """The files the assembler puts at info/licenses/<file name> itself."""
        return [path for name, path in self.paths().items() if "/" not in name]

    def nested(self) -> dict[str, Path]:
        """The files in folders, by their name under info/ (added to the package after assembly)."""
        return {f"licenses/{name}": path for name, path in self.paths().items() if "/" in name}


def _without_license_fields(metadata: str, moved: set[str]) -> tuple[str, int]:
    """METADATA with the License-File fields that name ``moved`` taken out (with their continuation lines); the
    rest byte for byte."""
    header, sep, body = metadata.partition("\n\n")
    kept: list[str] = []
    dropped = 0
    skipping = False
    for line in header.split("\n"):
        if skipping and line[:1] in (" ", "\t"):
            continue
        name, colon, value = line.partition(":")
        skipping = bool(colon) and name.strip().lower() == LICENSE_FILE and value.strip() in moved
        if skipping:
            dropped += 1
            continue
        kept.append(line)
    return "\n".join(kept) + sep + body, dropped


def _rewrite_record(record: Path, dist_info: str, moved: set[str], metadata: bytes) -> None:
    rows = [row for row in csv.reader(io.StringIO(record.read_text(encoding="utf-8"))) if row]
    prefix = f"{dist_info}/licenses/"
    kept = [row for row in rows if not (row[0].startswith(prefix) and row[0][len(prefix) :] in moved)]
    for row in kept:
        if row[0] == f"{dist_info}/METADATA":
            row[1:] = [record_hash(metadata), str(len(metadata))]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(kept)
    record.write_text(buffer.getvalue(), encoding="utf-8")


def take(site_packages: Path, dist_info: str, dest: Path) -> Licenses:
    """Move every file of ``site_packages/<dist_info>/licenses/`` to ``dest`` (relative paths kept) and copy the
    dist-info's top-level license files there too; RECORD and METADATA in the prefix are rewritten to match. ``dest``
    is made afresh. Raises UserError when the dist-info has no METADATA or RECORD."""
    folder = site_packages / dist_info
    metadata_path, record_path = folder / "METADATA", folder / "RECORD"
    for needed in (metadata_path, record_path):
        if not needed.is_file():
            raise UserError(f"{needed} is missing: the staged prefix has no installed metadata of the wheel")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    tree = folder / "licenses"
    moved: list[str] = []
    if tree.is_dir():
        for path in sorted(p for p in tree.rglob("*") if p.is_file() or p.is_symlink()):
            relative = path.relative_to(tree).as_posix()
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
            moved.append(relative)
        shutil.rmtree(tree)
    copied = []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and TOP_LEVEL.match(p.name)):
        if path.name not in moved:  # the licenses/ tree's copy wins; this one stays in the dist-info anyway
            shutil.copyfile(path, dest / path.name)
            copied.append(path.name)
    dropped = 0
    if moved:
        text, dropped = _without_license_fields(metadata_path.read_text(encoding="utf-8"), set(moved))
        metadata = text.encode("utf-8")
        metadata_path.write_bytes(metadata)
        _rewrite_record(record_path, dist_info, set(moved), metadata)
    return Licenses(root=dest, files=tuple(sorted([*moved, *copied])), moved=len(moved), dropped_fields=dropped)
