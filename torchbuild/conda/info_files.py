"""Adding files under ``info/`` of an assembled conda package, keeping their relative paths.

py-rattler-build's ``assemble_package`` copies each license file to ``info/licenses/<file name>``: a tree such as a
wheel's PEP 639 ``licenses/`` (75 files named LICENSE in torch 2.13) would collapse into one file. So the package is
assembled without the tree and the tree is added here, as conda-build lays it out. ``info/`` files are not payload:
paths.json does not list them, and conda extracts them into the package cache only.

A .conda keeps its info in a small tar of its own: only that tar is rewritten, and the outer zip is written again
with the payload's tar copied as it is (stored, as CEP 35 wants). A .tar.bz2 holds info and payload in one bzip2
stream, so the whole archive is decompressed and compressed again. The new members carry the package's own time,
owner and mode, so the package stays byte-identical from the same input. Both are read through host/archives.py's
checked reader: the zip's directory, and each tar member's header counted before its data is read.
"""

from __future__ import annotations

import bz2
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from torchbuild.config import nesting
from torchbuild.errors import UserError
from torchbuild.host import archives

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

COPY_CHUNK = 1 << 20


def _new_member(name: str, source: Path, like: tarfile.TarInfo) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = source.stat().st_size
    member.mtime = like.mtime
    member.mode = 0o644
    member.uid, member.gid, member.uname, member.gname = like.uid, like.gid, like.uname, like.gname
    return member


def _members(files: Mapping[str, Path], existing: set[str]) -> dict[str, Path]:
    added = {f"info/{name}": path for name, path in files.items()}
    clash = sorted(set(added) & existing)
    if clash:
        raise UserError(f"the package already has {', '.join(clash[:3])}: not added twice")
    return added


@contextmanager
def _replacing(package: Path) -> Iterator[Path]:
    """A temporary file beside ``package`` that replaces it when the block ends without an error."""
    handle, name = tempfile.mkstemp(prefix=package.name + ".", suffix=".part", dir=package.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, package)
    finally:
        temporary.unlink(missing_ok=True)


def _updated_index(data: bytes, member: tarfile.TarInfo, fields: Mapping[str, Any]) -> bytes:
    """info/index.json with ``fields`` set (conda's legacy ``features`` / ``track_features``, which py-rattler-build's
    assembly does not write); ``member``'s size follows."""
    index = {**nesting.loads(data), **fields}
    new = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
    member.size = len(new)
    return new


def _info_tar(
    stream: IO[bytes] | zstd.ZstdFile, package: Path, files: Mapping[str, Path], index: Mapping[str, Any]
) -> bytes:
    """The info tar of a .conda (``stream``, decompressed as it is read) with ``files`` (relative to info/) added and
    ``index`` merged into info/index.json, every member in name order. Its members are counted against
    host/archives.py's limits before each one's data is read."""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(fileobj=stream, mode="r|") as old:
        for _, member in archives.counted_tar(((old, m) for m in old), str(package), package.stat().st_size):
            handle = old.extractfile(member) if member.isfile() else None
            data = handle.read() if handle is not None else None
            if index and member.name == "info/index.json" and data is not None:
                data = _updated_index(data, member, index)
            members.append((member, data))
    if not members:
        raise UserError("the package's info tar is empty")
    like = next((m for m, _ in members if m.name == "info/index.json"), members[0][0])
    for name, source in _members(files, {m.name for m, _ in members}).items():
        members.append((_new_member(name, source, like), source.read_bytes()))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as new:
        for member, data in sorted(members, key=lambda pair: pair[0].name):
            new.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _add_to_conda(package: Path, files: Mapping[str, Path], level: int, index: Mapping[str, Any]) -> None:
    stem = package.name.removesuffix(".conda")
    info_name = f"info-{stem}.tar.zst"
    # The package is closed before the new file replaces it: Windows refuses to replace a file that is open
    # ("[WinError 5] Access denied", seen under Wine).
    with _replacing(package) as temporary, archives.open_zip(package, str(package)) as old:
        if info_name not in old.namelist():
            raise UserError(f"{package} has no {info_name}: not a .conda package")
        with old.open(info_name) as packed, zstd.ZstdFile(packed) as stream:
            info = zstd.compress(_info_tar(stream, package, files, index), level=level)
        with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_STORED) as new:
            for entry in old.infolist():
                copy = zipfile.ZipInfo(entry.filename, entry.date_time)
                copy.external_attr, copy.create_system = entry.external_attr, entry.create_system
                if entry.filename == info_name:
                    new.writestr(copy, info)
                    continue
                copy.file_size = entry.file_size  # so that zipfile writes a ZIP64 entry where the size needs one
                with old.open(entry) as src, new.open(copy, "w") as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)


def _add_to_tar_bz2(package: Path, files: Mapping[str, Path], level: int, index: Mapping[str, Any]) -> None:
    with _replacing(package) as temporary:
        like: tarfile.TarInfo | None = None
        names: set[str] = set()
        with (
            bz2.open(package, "rb") as raw,
            bz2.open(temporary, "wb", compresslevel=level) as packed,
            tarfile.open(fileobj=raw, mode="r|") as old,
            tarfile.open(fileobj=packed, mode="w|", format=tarfile.PAX_FORMAT) as new,
        ):
            for _, member in archives.counted_tar(((old, m) for m in old), str(package), package.stat().st_size):
                names.add(member.name)
                data: IO[bytes] | None = old.extractfile(member) if member.isfile() else None
                if member.name == "info/index.json":
                    like = member
                    if index and data is not None:
                        data = io.BytesIO(_updated_index(data.read(), member, index))
                new.addfile(member, data)
            if like is None:
                raise UserError(f"{package} has no info/index.json: not a conda package")
            for name, source in _members(files, names).items():
                with source.open("rb") as handle:
                    new.addfile(_new_member(name, source, like), handle)


def add(package: Path, files: Mapping[str, Path], *, level: int, index: Mapping[str, Any] | None = None) -> None:
    """Add ``files`` (name relative to ``info/`` -> the file on disk) to the package at ``package``, in place, and
    set ``index``'s fields in its info/index.json; ``level`` is the archive's compression level (zstd for .conda,
    bzip2 for .tar.bz2). Raises UserError when the file is not a conda package or already has one of the names."""
    if not files and not index:
        return
    try:
        if package.name.endswith(".conda"):
            _add_to_conda(package, files, level, index or {})
        elif package.name.endswith(".tar.bz2"):
            _add_to_tar_bz2(package, files, min(max(level, 1), 9), index or {})
        else:
            raise UserError(f"{package} is neither a .conda nor a .tar.bz2 package")
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zstd.ZstdError) as exc:
        raise UserError(f"adding {len(files)} files to info/ of {package} failed: {exc}") from None
