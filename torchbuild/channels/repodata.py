"""repodata.json of one conda subdir, its one reader: a file read back (strictly, or leniently where a missing or broken
index only means "not recorded"), its records by file name, the record of a package file, and merging records into
the current index.

A merge only adds (or, with replace, swaps) records: a record already in the index is never dropped, whatever the
publisher saw when it listed the channel.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.config import nesting
from torchbuild.errors import UserError

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


def section(filename: str) -> str:
    """The repodata key that holds a package file: .conda files and .tar.bz2 files are listed apart."""
    return "packages.conda" if filename.endswith(".conda") else "packages"


def is_package(filename: str) -> bool:
    return filename.endswith(PACKAGE_SUFFIXES)


@dataclass(frozen=True)
class Record:
    filename: str
    subdir: str
    fields: Mapping[str, Any]  # what repodata.json lists under the file name

    @property
    def sha256(self) -> str:
        return str(self.fields["sha256"])


def record_of(path: Path, sha256: str | None = None) -> Record:
    """The repodata record of a package file, from its own info/index.json (read by py-rattler) and its hashes."""
    from rattler import IndexJson

    if not is_package(path.name):
        raise UserError(f"{path}: not a conda package (expected {' or '.join(PACKAGE_SUFFIXES)})")
    try:
        index = IndexJson.from_package_archive(path)
    except Exception as exc:  # py-rattler raises its own exception types for unreadable archives
        raise UserError(f"{path}: not a readable conda package ({exc})") from None
    md5, sha = hashlib.md5(), hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            md5.update(block)
            sha.update(block)
    if sha256 is not None and sha.hexdigest() != sha256:
        raise UserError(f"{path}: sha256 {sha.hexdigest()} does not match the expected {sha256}")
    fields: dict[str, Any] = {
        "name": index.name.source,
        "version": str(index.version),
        "build": str(index.build),
        "build_number": index.build_number,
        "depends": list(index.depends),
        "constrains": list(index.constrains),
        "subdir": index.subdir,
        "md5": md5.hexdigest(),
        "sha256": sha.hexdigest(),
        "size": path.stat().st_size,
    }
    optional = {
        "arch": index.arch,
        "platform": index.platform,
        "license": index.license,
        "license_family": index.license_family,
        "features": index.features,
        "track_features": " ".join(index.track_features),
        "python_site_packages_path": index.python_site_packages_path,
        "timestamp": int(index.timestamp.timestamp() * 1000) if index.timestamp else None,
    }
    fields.update({key: value for key, value in optional.items() if value})
    if index.noarch.python:
        fields["noarch"] = "python"
    elif index.noarch.generic:
        fields["noarch"] = "generic"
    return Record(filename=path.name, subdir=str(index.subdir), fields=fields)


def load(path: Path) -> Any:
    """A repodata.json as it is; OSError where it cannot be read, ValueError where it is not JSON."""
    return nesting.loads(path.read_text(encoding="utf-8"))


def listed(repodata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every record of a repodata object by file name, .tar.bz2 ('packages') and .conda ('packages.conda') alike; the
    records themselves, not copies."""
    records: dict[str, dict[str, Any]] = {}
    for key in ("packages", "packages.conda"):
        part = repodata.get(key)
        if isinstance(part, dict):
            records.update({str(n): r for n, r in part.items() if isinstance(r, dict)})
    return records


def recorded(path: Path) -> dict[str, dict[str, Any]]:
    """The records of a subdir's repodata.json by file name; empty when it is missing or unreadable."""
    try:
        raw = load(path)
    except (OSError, ValueError):
        return {}
    return listed(raw) if isinstance(raw, dict) else {}


def index_whole(subdir: Path) -> bool:
    """The subdir's repodata.json is a JSON object and its repodata.json.zst (what conda clients fetch first) holds
    the same bytes."""
    try:
        plain = (subdir / "repodata.json").read_bytes()
        packed = zstd.decompress((subdir / "repodata.json.zst").read_bytes())
        return packed == plain and isinstance(nesting.loads(plain), dict)
    except (OSError, ValueError, zstd.ZstdError):
        return False


def same_index(made: Path, current: Path) -> bool:
    """The subdir index at ``made`` says what the whole one at ``current`` says, apart from when its records were
    indexed (py-rattler stamps each record with ``indexed_timestamp``): the current one is left as it is."""
    if not index_whole(current.parent):
        return False
    try:
        return _without_stamps(nesting.loads(made.read_bytes())) == _without_stamps(nesting.loads(current.read_bytes()))
    except (OSError, ValueError):
        return False


def _without_stamps(repodata: object) -> object:
    if not isinstance(repodata, dict):
        return repodata
    trimmed = dict(repodata)
    for key in ("packages", "packages.conda"):
        part = trimmed.get(key)
        if isinstance(part, dict):
            trimmed[key] = {name: {k: v for k, v in record.items() if k != "indexed_timestamp"}
                            if isinstance(record, dict) else record for name, record in part.items()}  # fmt: skip
    return trimmed


def empty(subdir: str) -> dict[str, Any]:
    return {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}, "removed": [], "repodata_version": 1}


def parse(text: str | bytes | None, subdir: str, where: str) -> dict[str, Any]:
    if text is None:
        return empty(subdir)
    try:
        data = nesting.loads(text)
    except ValueError as exc:
        raise UserError(f"{where} is not valid JSON ({exc}); run 'python pipeline.py index' to rebuild it") from None
    if not isinstance(data, dict):
        raise UserError(f"{where} is not a repodata object; run 'python pipeline.py index' to rebuild it")
    for key, value in empty(subdir).items():
        data.setdefault(key, value)
        if not isinstance(data[key], type(value)):
            raise UserError(
                f"{where}: '{key}' is not {'a list' if isinstance(value, list) else 'an object'}; run 'python "
                "pipeline.py index' to rebuild it"
            )
    return data


def conflicts(current: Mapping[str, Any], records: list[Record]) -> list[str]:
    """File names the index already lists with another sha256."""
    found = []
    for record in records:
        listed = current.get(section(record.filename), {}).get(record.filename)
        if listed is not None and listed.get("sha256") not in (None, record.sha256):
            found.append(record.filename)
    return found


def merge(current: Mapping[str, Any], records: list[Record], replace: bool = False) -> dict[str, Any] | None:
    """``current`` with ``records`` added; None when nothing changes. A different record under a listed name is
    refused unless ``replace``."""
    clashing = conflicts(current, records)
    if clashing and not replace:
        raise UserError(
            f"the index already lists {', '.join(clashing)} with another sha256; pass --replace to replace them"
        )
    merged = json.loads(json.dumps(current))
    changed = False
    for record in records:
        packages = merged.setdefault(section(record.filename), {})
        listed = packages.get(record.filename)
        if listed is None or listed.get("sha256") != record.sha256:
            packages[record.filename] = dict(record.fields)
            changed = True
    return merged if changed else None


def dumps(repodata: Mapping[str, Any]) -> bytes:
    return (json.dumps(repodata, indent=2, sort_keys=True) + "\n").encode()
