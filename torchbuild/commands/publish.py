"""``pipeline.py publish PATH... --channel C`` (already built artifacts, e.g. CI's) and ``pipeline.py index``.

PATH is a .conda/.tar.bz2/.whl file, or a directory: every ``report.json`` below it (torchbuild/run/report.py's) names
its cells' artifacts, found again relative to that report (the paths in it are from the machine that built them)
and checked against the sha256 and size it records. Every artifact then gets the verify stage's checks that need no
Plan before anything is written: one bad file and nothing is published. The layout a CI publish job downloads, one
build/ per job:

  artifacts/<job>/build/report.json
  artifacts/<job>/build/<cell-id>/...      (the files the report names, below build/ as on the build machine)

A local build/ with several cells (each run of a cell adds its own report, build/<cell-id>/report.json, and the
summary build/report.json names them all) publishes every cell that reaches a channel by the rule ``run`` follows
(run/records.reaches_channel: passed, or unverified and said so, exit 3 as ``run``), each named in the output.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

from rich.markup import escape

from torchbuild.channels import Channel, Upload, install_lines, nightly, requirement_of
from torchbuild.channels import repodata as rd
from torchbuild.channels.admission import validate
from torchbuild.channels.backends import open_channel
from torchbuild.commands import values
from torchbuild.config import matrix, nesting
from torchbuild.config.channel_spec import check_spec
from torchbuild.errors import UserError
from torchbuild.host.console import console, out
from torchbuild.results import Artifact
from torchbuild.run.records import EXIT_UNVERIFIED, reaches_channel
from torchbuild.stages import published_kind

Kind = Literal["conda", "wheel"]


@dataclass(frozen=True)
class Found:
    artifact: Artifact
    kind: Kind
    subdir: str  # the conda subdir from the package's own info/index.json; "whl" for a wheel
    source: str  # the report (and cell) or the file it came from
    name: str  # what users install: the conda package's name, or the wheel's project
    cell: str = ""  # the cell whose report names it; "" for a file given as such


def add_parsers(sub: Any) -> None:
    publish = sub.add_parser(
        "publish", help="publish built artifacts (report directories or package files) to a channel, no rebuild"
    )
    publish.add_argument("paths", nargs="+", type=values.path, metavar="PATH", help="directory with report.json files, "
                         "or .conda/.tar.bz2/.whl files")  # fmt: skip
    publish.add_argument("--channel", required=True, metavar="DIR|s3://BUCKET/PREFIX|anaconda://OWNER[/LABEL]",
                         help="the channel to publish to")  # fmt: skip
    publish.add_argument("--replace", action="store_true", help="replace a different file under a published name")
    index = sub.add_parser("index", help="rebuild a channel's indexes from the files that are in it")
    index.add_argument("--channel", required=True, metavar="DIR|s3://BUCKET/PREFIX",
                       help="the channel whose indexes are rebuilt")  # fmt: skip
    index.add_argument("--keep-nightlies", metavar="N", type=values.text, help="keep the newest N nights (a whole "
                       "number from 1) of each nightly package and platform: the older nightly files (.devN versions) "
                       "are deleted with the indexes in one commit; releases are never deleted")  # fmt: skip
    index.add_argument("--matrix", type=values.path, metavar="FILE", help="take N from this matrix file's "
                       "keep_nightlies where --keep-nightlies is not given (none there: every nightly is kept)",
                       )  # fmt: skip


def kind_of(path: Path) -> Kind:
    if path.name.endswith(rd.PACKAGE_SUFFIXES):
        return "conda"
    if path.name.endswith(".whl"):
        return "wheel"
    raise UserError(f"{path}: cannot publish this file; give .conda, .tar.bz2 or .whl files, or directories")


def locate(recorded: str, report: Path) -> Path | None:
    """The file a report names, below the report's directory (or its parent): the longest tail of the recorded
    path that exists there."""
    windows = "\\" in recorded or re.match(r"^[A-Za-z]:", recorded)  # a report from a Windows build job
    pure = PureWindowsPath(recorded) if windows else PurePosixPath(recorded)
    tails = [Path(*pure.parts[i:]) for i in range(1 if pure.anchor else 0, len(pure.parts))]
    for base in (report.parent, report.parent.parent):
        for tail in tails:
            if (base / tail).is_file():
                return base / tail
    return None


@dataclass(frozen=True)
class Cells:
    """What the reports said of their cells: the artifacts to publish, and the cells left out (failed) or published
    unverified, each as "<cell id> (<report>)" with, for an unverified one, what could not run."""

    found: list[Found]
    failed: list[str]
    unverified: list[str]


def _status(cell: dict[str, Any]) -> str:
    """A report's cell status ("status"; "ok" alone in a report of an older torchbuild)."""
    status = cell.get("status")
    return status if isinstance(status, str) else ("passed" if cell.get("ok", False) else "failed")


def _not_run(cell: dict[str, Any]) -> str:
    """An unverified cell's stages that are unverified, with the first line of what each said."""
    stages = [s for s in cell.get("stages", []) if isinstance(s, dict) and s.get("status") == "unverified"]
    return "; ".join(f"{s.get('stage')}: {str(s.get('message', '')).splitlines()[0] if s.get('message') else ''}"
                     for s in stages)  # fmt: skip


def _from_report(report: Path) -> tuple[list[Found], list[tuple[str, str]], list[tuple[str, str]]]:
    try:
        data = nesting.loads(report.read_text(encoding="utf-8"))
        cells = data["cells"]
    except nesting.NestedTooDeep as exc:
        raise UserError(f"{report}: not a torchbuild report ({exc})") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{report}: not a torchbuild report (expected JSON with 'cells')") from None
    if not isinstance(cells, list):
        raise UserError(f"{report}: 'cells' is not a list; not a torchbuild report")
    found: list[Found] = []
    failed: list[tuple[str, str]] = []  # (cell id, its report)
    unverified: list[tuple[str, str]] = []  # (cell id, its report and what could not run)
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_id", "?"), str):
            raise UserError(f"{report}: cell {number} is not a cell object with a 'cell_id'; not a torchbuild report")
        cell_id = cell.get("cell_id", f"#{number}")
        status = _status(cell)
        if not reaches_channel(status):
            failed.append((cell_id, str(report)))
            continue
        if status == "unverified":
            unverified.append((cell_id, f"{report}: {_not_run(cell)}"))
        artifacts = cell.get("artifacts", {})
        if not isinstance(artifacts, dict):
            raise UserError(f"{report}: cell {cell_id}'s 'artifacts' is not an object; not a torchbuild report")
        for name, entry in artifacts.items():
            kind = published_kind(str(name))  # the publish stage's rule: torch's, its companions', the 2018 names'
            if kind is None:
                continue
            recorded, sha256, size = _entry(entry, report, cell_id, kind)
            path = locate(recorded, report)
            if path is None:
                raise UserError(
                    f"{report}: cell {cell_id}'s {name} {recorded} is not below {report.parent} "
                    "(download the whole build/ directory of the job)"
                )
            artifact = Artifact.of(path)
            if (artifact.sha256, artifact.size) != (sha256, size):
                raise UserError(
                    f"{path}: sha256 {artifact.sha256} ({artifact.size} bytes) does not match {report}, which records "
                    f"{sha256} ({size} bytes) for cell {cell_id}; nothing was published"
                )
            found.append(_found(artifact, kind, f"{report} ({cell_id})", cell_id))
    return found, failed, unverified


def _entry(entry: Any, report: Path, cell_id: str, name: str) -> tuple[str, str, int]:
    """(path, sha256, size) of one artifact entry of a report, checked."""
    fields = entry if isinstance(entry, dict) else {}
    path, sha256, size = fields.get("path"), fields.get("sha256"), fields.get("size")
    if (
        isinstance(path, str) and path
        and isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256)
        and isinstance(size, int) and not isinstance(size, bool) and size >= 0
    ):  # fmt: skip
        return path, sha256, size
    problems = [
        *([] if isinstance(path, str) and path else ["'path' (a file path)"]),
        *([] if isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256) else ["'sha256' (64 hex digits)"]),
        *([] if isinstance(size, int) and size >= 0 else ["'size' (bytes)"]),
    ]
    raise UserError(
        f"{report}: cell {cell_id}'s {name} entry lacks a valid {', '.join(problems)}: a report from another "
        "torchbuild version, or edited? Publish the package files themselves, or rebuild"
    )


def _found(artifact: Artifact, kind: Kind, source: str, cell: str = "") -> Found:
    validate(artifact.path, kind)
    if kind == "wheel":
        return Found(artifact, kind, "whl", source, requirement_of(artifact.path.name), cell)
    record = rd.record_of(artifact.path, artifact.sha256)
    return Found(artifact, kind, record.subdir, source, str(record.fields["name"]), cell)


def collect(paths: Sequence[Path]) -> Cells:
    """Every artifact to publish, checked; the cells left out because they failed; those published unverified."""
    found: list[Found] = []
    failed: list[tuple[str, str]] = []
    unverified: list[tuple[str, str]] = []
    for path in paths:
        if path.is_dir():
            reports = sorted(path.rglob("report.json"))
            if not reports:
                raise UserError(f"{path}: no report.json below it (expected <job>/build/report.json per build job)")
            for report in reports:
                more, bad, unsure = _from_report(report)
                found += more
                failed += bad
                unverified += unsure
        elif path.is_file():
            found.append(_found(Artifact.of(path), kind_of(path), str(path)))
        else:
            raise UserError(f"{path}: no such file or directory")
    by_name: dict[str, Found] = {}
    for item in found:
        seen = by_name.setdefault(item.artifact.path.name, item)
        if seen.artifact.sha256 != item.artifact.sha256:
            raise UserError(
                f"two different files named {item.artifact.path.name}: {seen.source} and {item.source}; "
                "nothing was published"
            )
    return Cells(list(by_name.values()), _once(failed), _once(unverified))


def _once(cells: Sequence[tuple[str, str]]) -> list[str]:
    """build/report.json sums up the reports of build/<cell-id>/: a cell both name is one cell."""
    said: dict[str, str] = {}
    for cell_id, source in cells:
        said.setdefault(cell_id, f"{cell_id} ({source})")
    return list(said.values())


def publish(paths: Sequence[Path], spec: str, root: Path, replace: bool = False) -> int:
    """Exit 0, 1 where a cell failed (it is left out), EXIT_UNVERIFIED where none failed and one is published
    unverified: as ``run``."""
    channel = open_channel(spec, root)  # a bad channel URL is named before any artifact is read
    cells = collect(paths)  # every artifact checked before anything is written
    found = cells.found
    for cell in cells.failed:
        console.print(f"[yellow]not published[/]: cell {escape(cell)} failed")
    if not found:
        raise UserError("nothing to publish: " + ("every cell failed" if cells.failed else "no artifacts found"))
    with channel.locked():  # no other publisher writes between the check of each name and its write
        uploads = channel.plan(
            [(f.artifact, f.subdir) for f in found if f.kind == "conda"],
            [f.artifact for f in found if f.kind == "wheel"],
            replace=replace,
        )
        channel.apply(uploads)
    by_path = {f.artifact.path: f for f in found}
    for cell in dict.fromkeys(f.cell for f in found):
        files = ", ".join(u.channel_path for u in uploads if by_path[u.artifact.path].cell == cell)
        out.print(f"cell {cell}: {files}" if cell else f"files given: {files}", markup=False)
    for upload in uploads:
        out.print(f"{upload.action:9} {upload.channel_path}  sha256 {upload.artifact.sha256}", markup=False)
    say_install(channel, uploads, by_path)
    for cell in cells.unverified:
        out.print(f"unverified: cell {cell}: published unverified (a check could not run)", markup=False)
    if cells.failed:
        return 1
    return EXIT_UNVERIFIED if cells.unverified else 0


def say_install(channel: Channel, uploads: Sequence[Upload], found: dict[Path, Found]) -> None:
    """How to install what was published from this channel: the names and index URLs users need (the wheels of
    each cell on a line of their own), releases and nightlies each from their own (on stdout: they are the
    command's result)."""
    out.print(f"published to {channel.url}; install with:", markup=False)
    for night in (False, True):
        conda = [found[u.artifact.path].name for u in uploads if u.kind == "conda" and _nightly(u) == night]
        cells: dict[str, list[str]] = {}
        for upload in uploads:
            if upload.kind == "wheel" and _nightly(upload) == night:
                item = found[upload.artifact.path]
                cells.setdefault(item.cell, []).append(item.name)
        for line in install_lines(channel, conda, cells.values(), night=night):
            out.print(f"  {line}", markup=False)


def _nightly(upload: Upload) -> bool:
    return nightly.is_nightly(upload.artifact.path.name)


def keep_count(text: str | None) -> int | None:
    """--keep-nightlies N: a whole number of nights, at least 1."""
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise UserError(f"index: --keep-nightlies takes a number of nights, at least 1 (e.g. --keep-nightlies 30), "
                        f"not {text!r}; leave it out to keep every nightly.")  # fmt: skip
    return int(text)


def index(spec: str, root: Path, keep_nightlies: int | None = None) -> int:
    if check_spec(spec) == "anaconda":
        raise UserError(f"index: {spec} is an anaconda.org channel, which indexes what it receives; index rebuilds "
                        "the indexes of a directory or s3://bucket/prefix channel.")  # fmt: skip
    channel = open_channel(spec, root)
    summary, *removed = channel.index(keep_nightlies).splitlines()
    out.print(f"{channel.url}: {summary}", markup=False)
    for line in removed:
        out.print(line, markup=False)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    return publish(args.paths, args.channel, Path.cwd(), replace=args.replace)


def cmd_index(args: argparse.Namespace) -> int:
    keep = keep_count(args.keep_nightlies)
    if keep is None and args.matrix is not None:
        keep = matrix.load(args.matrix).keep_nightlies  # checked as every matrix is: at least 1
    return index(args.channel, Path.cwd(), keep)
