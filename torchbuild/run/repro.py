"""Which members of an archive changed between two builds from the same inputs (``--force`` reruns): the runner
says so, so that a build that is not reproducible is noticed where it happens.

A fingerprint is cheap: a zip's central directory (a wheel, or the outer zip of a .conda: name, CRC, size, date,
mode), plus for a .conda the members of its small info tarball (name, sha256, time). A .conda's payload tarball is
compared whole; a .tar.bz2 and any other file by its sha256.
"""

from __future__ import annotations

import hashlib
import sys
import tarfile
import zipfile
from pathlib import Path

from torchbuild.host import archives
from torchbuild.results import sha256_of

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

SHOWN = 8  # members named in one message


def _zip_entries(archive: zipfile.ZipFile) -> dict[str, str]:
    return {
        i.filename: f"crc {i.CRC:08x}, {i.file_size} bytes, {i.date_time}, mode {i.external_attr >> 16:o}"
        for i in archive.infolist()
    }


def _info_members(archive: zipfile.ZipFile, name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    with archive.open(name) as raw, zstd.open(raw, "rb") as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            handle = tar.extractfile(member) if member.isfile() else None
            digest = hashlib.sha256(handle.read()).hexdigest()[:16] if handle else member.type.decode()
            found[f"{name}:{member.name}"] = f"{digest}, mtime {member.mtime}"
    return found


def fingerprint(path: Path) -> dict[str, str]:
    """Member -> what identifies it; a file that is no zip is one entry, its sha256."""
    if not path.is_file():
        return {}
    try:
        with archives.open_zip(path) as archive:
            found = _zip_entries(archive)
            if path.name.endswith(".conda"):
                for name in archive.namelist():
                    if name.startswith("info-") and name.endswith(".tar.zst"):
                        found.update(_info_members(archive, name))
            return found
    except (zipfile.BadZipFile, tarfile.TarError, zstd.ZstdError, OSError, EOFError):
        return {path.name: sha256_of(path)}


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Members added, removed or changed, each named."""
    changed = [f"{name} ({before[name]} -> {after[name]})" for name in sorted(before.keys() & after.keys())
               if before[name] != after[name]]  # fmt: skip
    changed += [f"{name} (new)" for name in sorted(after.keys() - before.keys())]
    changed += [f"{name} (gone)" for name in sorted(before.keys() - after.keys())]
    return changed


def describe(name: str, changed: list[str]) -> str:
    shown = "; ".join(changed[:SHOWN]) + (f" (and {len(changed) - SHOWN} more)" if len(changed) > SHOWN else "")
    return f"not reproducible: {name} differs from the last build of the same inputs: {shown or 'same members'}"
