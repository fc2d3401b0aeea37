"""Checks of a wheel read back from disk: RECORD against the content (TB201), tags against the cell's planned wheel
(TB202), member paths (TB203), the SBOM against the files (TB206), a Windows wheel's paths against MAX_PATH under
typical install roots (TB207, path_budget.py); without a planned wheel (``publish`` of a wheel built elsewhere),
WHEEL's tags against the file name's (TB204)."""

from __future__ import annotations

import csv
import hashlib
import io
import zipfile
from collections import Counter
from pathlib import Path

from torchbuild.results import Check, define, result, skipped
from torchbuild.wheel import path_budget, sbom, wheelfile

TB201 = define("TB201", "wheel RECORD matches every file (sha256, size)")
TB202 = define("TB202", "wheel tags match the Plan")
TB203 = define("TB203", "no wheel member escapes the install root")
TB204 = define("TB204", "WHEEL's tags equal the file name's")
TB206 = define("TB206", "the wheel's SBOM matches its files (path, sha256)")
TB207 = define("TB207", "a Windows wheel's paths fit MAX_PATH under the typical install roots")
SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # signature files RECORD cannot list (they sign it)
HASHES = ("sha256", "sha384", "sha512")  # the wheel spec forbids weaker ones


def record_problems(zf: zipfile.ZipFile, dist_info: str) -> list[str]:
    """What is wrong between RECORD and the archive's files."""
    record_name = f"{dist_info}/RECORD"
    try:
        text = zf.read(record_name).decode("utf-8")
    except KeyError:
        return [f"{record_name} is missing"]
    rows = {row[0]: row for row in csv.reader(io.StringIO(text)) if row}
    members = [m for m in zf.infolist() if not m.is_dir()]
    problems = [
        f"{name} is in the archive {n} times" for name, n in Counter(m.filename for m in members).items() if n > 1
    ]
    for member in members:
        name = member.filename
        if name == record_name or (name.startswith(dist_info + "/") and name.rsplit("/", 1)[-1] in SIGNATURES):
            continue
        row = rows.pop(name, None)
        if row is None:
            problems.append(f"{name} is not in RECORD")
            continue
        if len(row) < 3 or "=" not in row[1]:
            problems.append(f"{name}: RECORD has no hash for it")
            continue
        algorithm, _, expected = row[1].partition("=")
        if algorithm not in HASHES:
            problems.append(f"{name}: RECORD uses {algorithm}; valid: {', '.join(HASHES)}")
            continue
        with zf.open(member) as handle:
            actual, size = wheelfile.record_digest(algorithm, handle)
        if actual != expected:
            problems.append(f"{name}: {algorithm} differs from RECORD")
        if row[2] != str(size):
            problems.append(f"{name}: {size} bytes, RECORD says {row[2] or 'nothing'}")
    rows.pop(record_name, None)
    problems += [f"{name} is in RECORD but not in the archive" for name in sorted(rows)]
    return problems


def own_tag_problems(wheel: wheelfile.WheelName, zf: zipfile.ZipFile) -> list[str]:
    """WHEEL's Tag lines must equal the file name's tags."""
    try:
        inside = wheelfile.wheel_file_tags(zf, wheel)
    except (wheelfile.WheelError, ValueError) as exc:
        return [str(exc)]
    if inside != wheel.tags:
        shown = ", ".join(sorted(str(t) for t in inside)) or "none"
        return [f"WHEEL's Tag lines ({shown}) differ from the file name's"]
    return []


def tag_problems(path: Path, zf: zipfile.ZipFile, planned_name: str) -> list[str]:
    """The file name's tags must include those of the Plan's wheel (``planned_name``), and WHEEL's Tag lines must
    equal the file name's."""
    try:
        wheel = wheelfile.parse_name(path)
        planned = wheelfile.parse_name(planned_name)
    except wheelfile.WheelError as exc:
        return [str(exc)]
    problems: list[str] = []
    if wheel.name != planned.name or wheel.version != planned.version:
        problems.append(f"{wheel.name} {wheel.version}, the Plan's is {planned.name} {planned.version}")
    missing = sorted(str(t) for t in planned.tags - wheel.tags)
    if missing:
        problems.append(f"the file name lacks the Plan's tag(s) {', '.join(missing)} (Plan's wheel: {planned_name})")
    return problems + own_tag_problems(wheel, zf)


def path_check(path: Path, name: wheelfile.WheelName, members: list[str], conda_dist: str | None) -> Check:
    """TB207: the path budget of a win_amd64 wheel in one line; failed where a root pip installs into is too short
    for the longest member. ``conda_dist``: the cell's conda package (name-version-build), for its cache's root."""
    windows = sorted(p for p in name.platforms if p.startswith("win"))
    if not windows:
        return skipped(TB207, path, f"not a Windows wheel ({', '.join(sorted(name.platforms))}): no MAX_PATH")
    pythons = sorted(i[2] + "." + i[3:] for i in name.interpreters if i.startswith("cp") and i[2:].isdigit())
    python = pythons[0] if pythons else "3.12"
    dist = conda_dist or f"{name.name}-{name.version.public}-py{python}_0"
    budget = path_budget.budget(members, python, dist)
    problems = [
        f"{root.name}: {len(where)} + {len(budget.longest)} characters, over MAX_PATH ({path_budget.WIN_PATH_LIMIT}): "
        f"{where}{budget.longest.replace('/', chr(92))}"
        for root, where in budget.too_long()
    ]
    return result(TB207, path, [*problems, budget.line()] if problems else [], budget.line())


def check_wheel(path: Path, planned: str | None = None, conda_dist: str | None = None) -> list[Check]:
    """TB201-TB203, TB206 and TB207 for the wheel at ``path``, against the Plan's wheel name ``planned``; without
    one, TB204 instead of TB202 (and a wheel without an SBOM is not failed for it). ``conda_dist``: the name-version-
    build of the cell's conda package, for the path budget's line."""
    tags = TB202 if planned is not None else TB204
    codes = (TB201, tags, TB203)
    try:
        name = wheelfile.parse_name(path)
        zf = wheelfile.open_wheel(path)
    except wheelfile.WheelError as exc:
        return [result(code, path, [str(exc)]) for code in codes]
    with zf:
        escaping = [f"{member} ({why})" for member, why in wheelfile.unsafe_members(zf)]
        try:
            dist_info = wheelfile.dist_info_dir(zf, name)
        except wheelfile.WheelError as exc:
            return [result(TB201, path, [str(exc)]), result(tags, path, [str(exc)]), result(TB203, path, escaping)]
        files = sum(1 for m in zf.infolist() if not m.is_dir())
        if planned is not None:
            tag_check = result(TB202, path, tag_problems(path, zf, planned), f"tags include the Plan's ({planned})")
        else:
            tag_check = result(TB204, path, own_tag_problems(name, zf), ", ".join(sorted(map(str, name.tags))))
        return [
            result(TB201, path, record_problems(zf, dist_info), f"{files:,} files match RECORD"),
            tag_check,
            result(TB203, path, escaping),
            _sbom_check(path, zf, dist_info, required=planned is not None),
            path_check(path, name, [m.filename for m in zf.infolist() if not m.is_dir()], conda_dist),
        ]


def wheel_problems(zf: zipfile.ZipFile, dist_info: str) -> list[str] | None:
    """What is wrong between the wheel's torchbuild SBOM and its members; None when it carries none."""
    member = sbom.wheel_member(dist_info)
    if member not in zf.namelist():
        return None
    names = set(zf.namelist())

    def digest(name: str) -> str | None:
        return hashlib.sha256(zf.read(name)).hexdigest() if name in names else None

    text = zf.read(member).decode("utf-8")
    return sbom.problems(text, {name: sha for name in sbom.listed_files(text) if (sha := digest(name)) is not None})


def _sbom_check(path: Path, zf: zipfile.ZipFile, dist_info: str, required: bool) -> Check:
    problems = wheel_problems(zf, dist_info)
    if problems is None:
        missing = f"no {sbom.wheel_member(dist_info)}"
        return (
            result(TB206, path, [missing]) if required else skipped(TB206, path, f"{missing} (not made by torchbuild)")
        )
    return result(
        TB206,
        path,
        problems,
        f"{len(sbom.listed_files(zf.read(sbom.wheel_member(dist_info)).decode()))} vendored files listed",
    )
