"""Installing a wheel into a staging prefix the way pip installs it into a conda environment: the payload of the
cell's conda package (the conda stage assembles it). Errors are UserErrors; the stage that calls names itself."""

from __future__ import annotations

import concurrent.futures
import csv
import io
import os
import re
import shutil
import zipfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from torchbuild.errors import UserError, one_of
from torchbuild.wheel import wheelfile
from torchbuild.wheel.wheelfile import WheelInfo, record_hash

LICENSE_NAMES = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)(\.[A-Za-z0-9]+)?$", re.IGNORECASE)
# A console script that finds the environment's python next to itself, so no prefix placeholder is needed: the
# shell runs line 2; Python sees lines 2-3 as a string. This is the form pip (distlib) writes for long shebangs.
UNIX_SCRIPT_HEAD = """#!/bin/sh
'''exec' "$(dirname -- "$(readlink -f -- "$0")")/python" "$0" "$@"
' '''
"""
ENTRY_POINT_BODY = """# -*- coding: utf-8 -*-
import re
import sys
from {module} import {name}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({call}())
"""


def _open(path: Path) -> zipfile.ZipFile:
    try:
        return wheelfile.open_wheel(path)
    except wheelfile.WheelError as exc:
        raise UserError(str(exc)) from None


@dataclass(frozen=True)
class Payload:
    root: Path  # the staging prefix: its files are the package's payload
    files: int
    size: int
    scripts: tuple[str, ...]  # console scripts written from entry points, relative to the prefix
    scripts_not_made: tuple[str, ...]  # entry points that got no script on this platform
    left_out: tuple[str, ...] = ()  # wheel members not installed (a run dependency provides them)


def _scheme(scheme: Mapping[str, str], wheel: WheelInfo) -> dict[str, str]:
    return {key: value.replace("{dist}", wheel.name) for key, value in scheme.items()}


def _target(name: str, wheel: WheelInfo, scheme: Mapping[str, str]) -> PurePosixPath:
    """Where a wheel member goes, relative to the prefix (pip's rules: .data/<key>/ goes to the scheme's key)."""
    first, _, rest = name.partition("/")
    if first != wheel.data_dir:
        return PurePosixPath(scheme["platlib"], name)
    key, _, inner = rest.partition("/")
    if key not in scheme:
        raise UserError(f"{wheel.path}: {name} is in {first}/{key}/; valid: {one_of(sorted(scheme))}")
    return PurePosixPath(scheme[key], inner) if scheme[key] else PurePosixPath(inner)


def _script_text(target: str) -> str:
    module, _, attr = target.partition(":")
    attr = attr.split("[", 1)[0].strip()  # "module:attr [extra]" is an old form; the extra does not matter here
    return UNIX_SCRIPT_HEAD + ENTRY_POINT_BODY.format(
        module=module.strip(), name=attr.split(".")[0], call=attr or module.strip()
    )


def _fix_shebang(path: Path, member: str) -> dict[str, list[str]]:
    """pip's rule for .data/scripts: a '#!python' first line means "the environment's python"."""
    data = path.read_bytes()
    if not data.startswith((b"#!python\n", b"#!python\r\n", b"#!pythonw\n", b"#!pythonw\r\n")):
        return {}
    data = UNIX_SCRIPT_HEAD.encode("utf-8") + data.split(b"\n", 1)[1]
    path.write_bytes(data)
    path.chmod(0o755)
    return {member: [record_hash(data), str(len(data))]}


LARGE_MEMBER = 16 << 20


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo, out: Path) -> None:
    with zf.open(info) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def _extract_all(zf: zipfile.ZipFile, jobs: Sequence[tuple[zipfile.ZipInfo, Path]]) -> None:
    """Every member to its file. The few large ones (torch's shared libraries) are inflated by a second thread
    while this one writes the many small ones: zlib and file writes release the GIL, so both cores work."""
    large = [job for job in jobs if job[0].file_size >= LARGE_MEMBER]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as helper:
        pending = [helper.submit(_extract, zf, *job) for job in large]
        for job in jobs:
            if job[0].file_size < LARGE_MEMBER:
                _extract(zf, *job)
        for done in pending:
            done.result()


def unpack_wheel(
    wheel: WheelInfo,
    install_scheme: Mapping[str, str],
    dest: Path,
    *,
    windows: bool,
    leave_out: Collection[str] = (),
    replace: Mapping[str, bytes] | None = None,
) -> Payload:
    """Install ``wheel`` into the empty staging prefix ``dest`` the way pip would into a conda environment laid out
by ``install_scheme`` (``{dist}``: the wheel's name) on Windows (``windows``) or elsewhere.

    Keeps the .dist-info (INSTALLER says "conda"; RECORD lists what is installed, relative to site-packages),
    moves .data/ parts to their scheme directories, and writes console scripts on platforms where a plain script
    runs (linux-64). Every member path is checked before anything is written. The members ``leave_out`` names are
    not installed, and RECORD does not list them (a run dependency of the package provides them). The members
    ``replace`` names (added when absent) are installed with its content instead, and RECORD says so.
    """
    replace = dict(replace or {})
    scheme = _scheme(install_scheme, wheel)
    site = PurePosixPath(scheme["purelib"])
    moved: dict[str, PurePosixPath] = {}
    rewritten: dict[str, list[str]] = {}  # member -> its new RECORD hash and size
    files = size = 0
    with _open(wheel.path) as zf:
        members = [m for m in zf.infolist() if not m.is_dir() and m.filename not in leave_out]
        bad = wheelfile.unsafe_members(zf)
        if bad:
            name, why = bad[0]
            raise UserError(f"{wheel.path}: member {name!r} escapes the install root ({why}); not unpacked")
        placed: list[tuple[zipfile.ZipInfo, PurePosixPath, Path]] = []
        made: set[Path] = set()
        for info in members:
            target = _target(info.filename, wheel, scheme)
            if info.filename.split("/", 1)[0] == wheel.data_dir:
                moved[info.filename] = target
            out = dest / target
            if out.parent not in made:
                out.parent.mkdir(parents=True, exist_ok=True)
                made.add(out.parent)
            placed.append((info, target, out))
            if info.filename in replace:
                data = replace.pop(info.filename)
                out.write_bytes(data)
                rewritten[info.filename] = [record_hash(data), str(len(data))]
        _extract_all(zf, [(info, out) for info, _, out in placed if info.filename not in rewritten])
        for info, target, out in placed:
            mode = (info.external_attr >> 16) & 0o777
            out.chmod(0o755 if mode & 0o111 else 0o644)
            if target.parent == PurePosixPath(scheme["scripts"]) and not windows:
                rewritten.update(_fix_shebang(out, info.filename))
            files += 1
            size += out.stat().st_size
        record_text = zf.read(f"{wheel.dist_info}/RECORD").decode("utf-8")

    rows = [row for row in csv.reader(io.StringIO(record_text)) if row and row[0] not in leave_out]
    for row in rows:
        if row[0] in rewritten:
            row[1:] = rewritten[row[0]]
        if row[0] in moved:
            row[0] = os.path.relpath(moved[row[0]], site).replace(os.sep, "/")
    added: dict[PurePosixPath, bytes] = {PurePosixPath(site, wheel.dist_info, "INSTALLER"): b"conda\n"}
    added.update({_target(member, wheel, scheme): data for member, data in replace.items()})
    scripts: list[str] = []
    not_made: list[str] = []
    for group in ("console_scripts", "gui_scripts"):
        for script, reference in sorted(wheel.entry_points.get(group, {}).items()):
            if windows or ":" not in reference:
                # A Windows script needs a launcher .exe, which a wheel does not carry.
                not_made.append(script)
                continue
            path = PurePosixPath(scheme["scripts"], script)
            added[path] = _script_text(reference).encode("utf-8")
            scripts.append(str(path))
    for path, data in added.items():
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        out.chmod(0o755 if str(path) in scripts else 0o644)
        rel = os.path.relpath(path, site).replace(os.sep, "/")
        rows = [r for r in rows if r[0] != rel]
        rows.append([rel, record_hash(data), str(len(data))])
        files += 1
        size += len(data)
    record_rel = f"{wheel.dist_info}/RECORD"
    rows = [r for r in rows if r[0] != record_rel] + [[record_rel, "", ""]]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    (dest / site / record_rel).write_text(buffer.getvalue(), encoding="utf-8")
    return Payload(
        root=dest,
        files=files,
        size=size,
        scripts=tuple(scripts),
        scripts_not_made=tuple(sorted(not_made)),
        left_out=tuple(sorted(leave_out)),
    )


def license_files(wheel: WheelInfo, payload: Payload, site_packages: str) -> list[Path]:
    """The wheel's top-level license files (LICENSE, COPYING, NOTICE), for info/licenses."""
    dist_info = payload.root / site_packages / wheel.dist_info
    found: list[Path] = []
    for folder in (dist_info / "licenses", dist_info):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file() and LICENSE_NAMES.match(p.name))
    return found
