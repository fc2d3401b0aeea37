"""Give a wheel a local version label (torch 2.5.1 -> 2.5.1+cpu) without recompressing it.

PyPI's win_amd64 torch wheels are the CPU builds under the plain release version; the cell's wheel is named with
its variant (``2.5.1+cpu``) so that a channel can hold the CPU and CUDA builds side by side. Only the .dist-info
changes (its directory name, METADATA's Version, RECORD); every other member's compressed bytes are copied as they
are, which takes seconds where recompressing a 1 GB payload takes minutes.
"""

from __future__ import annotations

import base64
import copy
import csv
import hashlib
import io
import re
import struct
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # zip local file header, 30 bytes
DATA_DESCRIPTOR_FLAG = 0x08


class VersionError(ValueError):
    """The wheel cannot be re-versioned; the message names the file."""


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _copy_raw(source: zipfile.ZipFile, target: zipfile.ZipFile, info: zipfile.ZipInfo, name: str | None = None) -> None:
    """Append ``info``'s member to ``target`` (as ``name`` when given) with its compressed bytes untouched."""
    assert source.fp is not None and target.fp is not None
    source.fp.seek(info.header_offset)
    fields = LOCAL_HEADER.unpack(source.fp.read(LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise VersionError(f"{source.filename}: bad local header for {info.filename}")
    source.fp.seek(info.header_offset + LOCAL_HEADER.size + fields[-2] + fields[-1])
    raw = source.fp.read(info.compress_size)
    out = copy.copy(info)
    if name is not None:
        out.filename = out.orig_filename = name
    out.flag_bits &= ~DATA_DESCRIPTOR_FLAG  # sizes and CRC go into the local header instead
    out.header_offset = target.fp.tell()
    target.fp.write(out.FileHeader(zip64=max(info.file_size, info.compress_size) > zipfile.ZIP64_LIMIT))
    target.fp.write(raw)
    target.filelist.append(out)
    target.NameToInfo[out.filename] = out
    target.start_dir = target.fp.tell()


def set_version(wheel: Path, dest_dir: Path, version: str) -> Path:
    """Write ``wheel`` with version ``version`` into ``dest_dir``; return the new wheel's path."""
    name, old_version, _, _ = parse_wheel_filename(wheel.name)
    stem = name.replace("-", "_")
    old_dist = f"{stem}-{old_version}.dist-info"
    new_dist = f"{stem}-{version}.dist-info"
    parts = wheel.name.split("-")
    parts[1] = version.replace("-", "_")
    dest = dest_dir / "-".join(parts)
    part = dest.with_name(dest.name + ".part")
    with zipfile.ZipFile(wheel) as source:
        names = source.namelist()
        if f"{old_dist}/METADATA" not in names or f"{old_dist}/RECORD" not in names:
            raise VersionError(f"{wheel}: no {old_dist}/METADATA and RECORD")
        metadata = source.read(f"{old_dist}/METADATA").decode("utf-8")
        metadata, count = re.subn(r"^Version: .*$", f"Version: {version}", metadata, count=1, flags=re.MULTILINE)
        if count != 1:
            raise VersionError(f"{wheel}: {old_dist}/METADATA has no Version field")
        new_metadata = metadata.encode("utf-8")
        rows = [r for r in csv.reader(io.StringIO(source.read(f"{old_dist}/RECORD").decode("utf-8"))) if r]
        for row in rows:
            if row[0].startswith(old_dist + "/"):
                row[0] = new_dist + row[0][len(old_dist) :]
            if row[0] == f"{new_dist}/METADATA":
                row[1:] = [_record_hash(new_metadata), str(len(new_metadata))]
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        replaced = {f"{old_dist}/METADATA": new_metadata, f"{old_dist}/RECORD": buffer.getvalue().encode("utf-8")}
        with zipfile.ZipFile(part, "w") as target:
            for info in source.infolist():
                if info.filename in replaced:
                    new_info = zipfile.ZipInfo(new_dist + info.filename[len(old_dist) :], info.date_time)
                    new_info.external_attr = info.external_attr
                    target.writestr(new_info, replaced[info.filename], compress_type=zipfile.ZIP_DEFLATED)
                elif info.filename.startswith(old_dist + "/"):
                    _copy_raw(source, target, info, new_dist + info.filename[len(old_dist) :])
                else:
                    _copy_raw(source, target, info)
    part.replace(dest)
    return dest

