"""Rewriting a wheel without recompressing it: members added, replaced or renamed, RECORD kept true, and (given an
epoch) the archive made deterministic. Every member that does not change keeps its compressed bytes: seconds for a
1 GB torch wheel, where recompressing it takes minutes.

Deterministic form: members sorted by name with the .dist-info directory last and its RECORD last, no directory
entries, every member dated ``epoch`` (UTC, clipped to 1980) with mode 0644 or 0755 as made on Unix, and RECORD's
rows in member order. The same members give the same bytes whatever filesystem, umask or clock the tools that made
the wheel ran with.
"""

from __future__ import annotations

import copy
import csv
import datetime
import io
import struct
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from torchbuild.host import archives
from torchbuild.wheel.wheelfile import WheelError, find_dist_info, record_hash

LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # zip local file header, 30 bytes
DATA_DESCRIPTOR_FLAG = 0x08
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can carry
UNIX = 3  # create_system: the external attributes are Unix mode bits


class RewriteError(ValueError):
    """The wheel cannot be rewritten; the message names the file."""


def _date_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    moment = datetime.datetime.fromtimestamp(max(epoch, ZIP_EPOCH), tz=datetime.timezone.utc)
    return (moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second)


def _normal_mode(info: zipfile.ZipInfo) -> int:
    executable = (info.external_attr >> 16) & 0o111
    return (0o100755 if executable else 0o100644) << 16


def _copy_raw(source: zipfile.ZipFile, target: zipfile.ZipFile, info: zipfile.ZipInfo, out: zipfile.ZipInfo) -> None:
    """Append ``info``'s member to ``target`` as ``out`` (name, date, mode) with its compressed bytes untouched."""
    assert source.fp is not None and target.fp is not None
    source.fp.seek(info.header_offset)
    fields = LOCAL_HEADER.unpack(source.fp.read(LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise RewriteError(f"{source.filename}: bad local header for {info.filename}")
    source.fp.seek(info.header_offset + LOCAL_HEADER.size + fields[-2] + fields[-1])
    raw = source.fp.read(info.compress_size)
    out.flag_bits &= ~DATA_DESCRIPTOR_FLAG  # sizes and CRC go into the local header instead
    out.header_offset = target.fp.tell()
    target.fp.write(out.FileHeader(zip64=max(info.file_size, info.compress_size) > zipfile.ZIP64_LIMIT))
    target.fp.write(raw)
    # zipfile has no public way to add a member whose bytes are already compressed: register it as write() would.
    target.filelist.append(out)
    target.NameToInfo[out.filename] = out
    target.start_dir = target.fp.tell()


def dist_info_of(archive: zipfile.ZipFile) -> str:
    try:
        return find_dist_info(archive)
    except WheelError as exc:
        raise RewriteError(str(exc)) from None


def _order(names: list[str], dist_info: str) -> list[str]:
    record = f"{dist_info}/RECORD"
    return sorted(names, key=lambda n: (n == record, n.startswith(dist_info + "/"), n))


def rewrite(
    wheel: Path,
    dest: Path,
    *,
    files: Mapping[str, bytes] | None = None,
    rename: Callable[[str], str] | None = None,
    epoch: int | None = None,
    drop: Callable[[str], bool] | None = None,
) -> Path:
    """Write ``wheel`` to ``dest`` with ``files`` (names after renaming) added or replaced and listed in RECORD,
    every member renamed by ``rename``, those ``drop`` names (before renaming) left out, and with ``epoch`` in the
    deterministic form. Returns ``dest``."""
    files = dict(files or {})
    rename = rename or (lambda name: name)
    dropped = drop or (lambda name: False)
    part = dest.with_name(dest.name + ".part")
    with archives.open_zip(wheel) as source:
        old_dist = dist_info_of(source)
        dist_info = rename(old_dist + "/x")[: -len("/x")]
        record = f"{dist_info}/RECORD"
        members = {rename(i.filename): i for i in source.infolist() if not i.is_dir() and not dropped(i.filename)}
        if f"{old_dist}/RECORD" not in {i.filename for i in source.infolist()}:
            raise RewriteError(f"{wheel}: {old_dist}/RECORD is missing")
        rows = [r for r in csv.reader(io.StringIO(source.read(f"{old_dist}/RECORD").decode("utf-8"))) if r]
        rows = [r for r in rows if not dropped(r[0])]
        for row in rows:
            row[0] = rename(row[0])
        for name, data in files.items():
            rows = [r for r in rows if r[0] != name] + [[name, record_hash(data), str(len(data))]]
        names = [*dict.fromkeys([*members, *files])]
        if epoch is not None:
            names = _order(names, dist_info)
            position = {name: i for i, name in enumerate(names)}
            rows.sort(key=lambda r: position.get(r[0], len(names)))
        rows = [r for r in rows if r[0] != record] + [[record, "", ""]]
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        files[record] = buffer.getvalue().encode("utf-8")
        with zipfile.ZipFile(part, "w") as target:
            for name in names if record in names else [*names, record]:
                info = members.get(name)
                if name in files:
                    new = zipfile.ZipInfo(name, _date_time(epoch) if epoch is not None else info.date_time if info
                                          else _date_time(ZIP_EPOCH))  # fmt: skip
                    new.external_attr = _normal_mode(info) if info else 0o100644 << 16
                    new.create_system = UNIX
                    target.writestr(new, files[name], compress_type=zipfile.ZIP_DEFLATED)
                    continue
                assert info is not None
                out = copy.copy(info)
                out.filename = out.orig_filename = name
                if epoch is not None:
                    out.date_time = _date_time(epoch)
                    out.external_attr = _normal_mode(info)
                    out.create_system = UNIX
                _copy_raw(source, target, info, out)
    part.replace(dest)
    return dest
