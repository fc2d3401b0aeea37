"""The run's report: JSON, Markdown (also for $GITHUB_STEP_SUMMARY) and JUnit XML, each written atomically."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any

from rich.markup import escape

from torchbuild.errors import UserError
from torchbuild.host.console import MARKS, console, out
from torchbuild.host.files import write_atomic
from torchbuild.knowledge.pairing import Companion
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.run import report_html
from torchbuild.run.records import CellRun, StageRecord
from torchbuild.stages import companion_artifact
from torchbuild.wheel.repair_report import RepairReport


@dataclass(frozen=True)
class ReportPaths:
    json: Path
    markdown: Path
    junit: Path
    html: Path


def cell_entry(cell: CellRun, build: Path) -> dict[str, Any]:
    """A cell's entry in report.json. Its ``logs`` are relative to the cell's directory (build/<cell-id>)."""
    plan = cell.plan
    directory = build / Path(plan.work_dir).name
    logs = directory / "logs"
    return {
        "cell_id": plan.cell_id,
        "dir": directory.name,
        "ok": cell.status == "passed",  # an unverified cell is not ok ("status" says which)
        "status": cell.status,
        "torch": plan.version,
        "platform": plan.platform,
        "python": plan.python,
        "cuda": plan.cuda,
        "started": cell.started,
        "seconds": None if cell.seconds is None else round(cell.seconds, 3),
        "stages": [r.to_dict() for r in cell.records],
        "artifacts": {name: a.to_dict() for name, a in cell.artifacts.items()},
        "companions": [_companion(companion, cell.artifacts) for companion in plan.companions],
        "vendored": _vendored(cell.artifacts.get("repair_report")),
        "declared_libraries": [f"{w.name} {w.version}" for w in plan.declared_libraries],
        "logs": sorted(p.relative_to(directory).as_posix() for p in logs.rglob("*") if p.is_file())
        if logs.is_dir() else [],
    }  # fmt: skip


def _vendored(repair_report: Artifact | None) -> list[str]:
    """The libraries the repair put into the wheel (their paths in it), from its repair.json; none where unread."""
    if repair_report is None or not repair_report.path.is_file():
        return []
    try:
        return [row.path for row in RepairReport.read(repair_report.path).vendored]
    except UserError:
        return []


def run_status(statuses: Iterable[str]) -> str:
    """The run's: failed (a cell failed), unverified (none failed, one is unverified) or passed."""
    found = set(statuses)
    return next((s for s in ("failed", "unverified") if s in found), "passed")


def as_dict(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    status = run_status(c.get("status", "passed" if c["ok"] else "failed") for c in entries)
    return {"ok": status == "passed", "status": status, "cells": list(entries)}


def companion_line(companion: Companion, artifacts: Mapping[str, Artifact]) -> tuple[str, str]:
    """A companion's status and line for the report: "built" (its package is among the cell's artifacts), "not
    built" (paired, the stages do not build it, or did not in this run: the line says why) or "not shipped"."""
    if companion.built and companion_artifact("conda_package", companion.name) not in artifacts:
        return "not built", f"{companion.line}; not built in this run (no package: see the stages' messages above)"
    return ("built" if companion.built else "not built" if companion.release else "not shipped"), companion.line


def _companion(companion: Companion, artifacts: Mapping[str, Artifact]) -> dict[str, Any]:
    """A companion in report.json (``companion_line``)."""
    status, line = companion_line(companion, artifacts)
    return {"name": companion.name, "release": companion.release, "status": status, "wheel": companion.wheel,
            "line": line}  # fmt: skip


# Status icons of the Markdown reports (this one, and the nightly's summary: scripts/ci_summary.py).
ICONS = {"passed": "✅", "cached": "♻️", "skipped": "⏭️", "failed": "❌", "not run": "·", "unverified": "⚠️"}


def icon(status: str) -> str:
    return ICONS.get(status, status)


def artifact_table(rows: Iterable[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """Markdown rows ``| cell | artifacts | file | size | sha256 |`` of (cell id, artifact name, report.json entry):
    one row per file, by its path, with every name it goes by (the source wheel and the repaired one share a file
    name, not their bytes; a published file is the channel's)."""
    lines = ["| cell | artifact | file | size | sha256 |", "|---|---|---|---|---|"]
    for (cell_id, path), (names, artifact) in report_html.files_of(rows).items():
        file = PureWindowsPath(path).name  # a report from a Windows job has '\\' paths
        size = f"{int(artifact['size']) / 1e6:.1f} MB"
        lines.append(f"| `{cell_id}` | {', '.join(names)} | `{file}` | {size} | `{artifact['sha256']}` |")
    return lines


def markdown(data: Mapping[str, Any]) -> str:
    cells = data["cells"]
    stages = [s["stage"] for s in cells[0]["stages"]] if cells else []
    lines = ["## torchbuild", "", "| cell | torch | status | " + " | ".join(stages) + " |"]
    lines.append("|" + "---|" * (3 + len(stages)))
    for cell in cells:
        status = cell.get("status", "passed" if cell["ok"] else "failed")
        row = [f"`{cell['cell_id']}`", cell["torch"], f"{icon(status)} {status}"]
        row += [f"{icon(s['status'])} {s['duration']:.0f}s" for s in cell["stages"]]
        lines.append("| " + " | ".join(row) + " |")
    rows = [(c["cell_id"], name, a) for c in cells for name, a in c["artifacts"].items()]
    lines += ["", *artifact_table(rows)]
    companions = [(c["cell_id"], companion["line"]) for c in cells for companion in c["companions"]]
    if companions:
        lines += ["", "### torchvision and torchaudio", ""]
        lines += [f"- {cell_id}: {line}" for cell_id, line in companions]
    ran_on = [(c["cell_id"], s) for c in cells for s in c["stages"] if s.get("ran_on")]
    if ran_on:
        lines += ["", "### Where the checks ran", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['status']} {s['ran_on']}" for cell_id, s in ran_on]
    problems = [(c["cell_id"], s) for c in cells for s in c["stages"] if s["status"] == "failed"]
    if problems:
        lines += ["", "### Failures", ""]
        for cell_id, stage in problems:
            lines += [f"**{cell_id} / {stage['stage']}**", "", "```", stage["message"], "```", ""]
    unverified = [(c["cell_id"], s) for c in cells for s in c["stages"] if s["status"] == "unverified"]
    if unverified:
        lines += ["", "### Unverified (published, but a check could not run)", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['message']}" for cell_id, s in unverified]
    skipped = [(c["cell_id"], s) for c in cells for s in c["stages"] if s["status"] == "skipped" and s["message"]]
    if skipped:
        lines += ["", "### Skipped", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['message']}" for cell_id, s in skipped]
    return "\n".join(lines) + "\n"


def junit(data: Mapping[str, Any]) -> str:
    """JUnit XML: a test case per stage and per check; each suite's counts are those of its test cases."""
    suites = ET.Element("testsuites", name="torchbuild")
    for cell in data["cells"]:
        cell_id = cell["cell_id"]
        suite = ET.SubElement(suites, "testsuite", name=cell_id)
        for record in cell["stages"]:
            stage, status, message = record["stage"], record["status"], record["message"]
            case = ET.SubElement(suite, "testcase", classname=cell_id, name=stage, time=f"{record['duration']:.3f}")
            if status == "failed":
                first = message.splitlines()[0] if message else "failed"
                ET.SubElement(case, "failure", message=first).text = message
            elif status in ("skipped", "not run", "unverified"):
                ET.SubElement(case, "skipped", type=status, message=message or status)
            if record.get("ran_on"):
                properties = ET.SubElement(case, "properties")
                ET.SubElement(properties, "property", name="ran_on", value=record["ran_on"])
                ET.SubElement(case, "system-out").text = message
            for check in record["checks"]:
                sub = ET.SubElement(suite, "testcase", classname=f"{cell_id}.{stage}", name=check["name"])
                if check.get("duration") is not None and not check.get("timed_with"):  # a group's: not per check
                    sub.set("time", f"{check['duration']:.3f}")
                if check["status"] == "failed":
                    text = f"{check.get('code', '')} {check['message']}".strip()
                    ET.SubElement(sub, "failure", message=text).text = check.get("file", "")
                elif check["status"] in ("skipped", "unverified"):
                    ET.SubElement(sub, "skipped", type=check["status"], message=check["message"])
        _count(suite, time=sum(float(r["duration"]) for r in cell["stages"]))
    _count(suites, time=sum(float(s.get("time", "0")) for s in suites))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _count(element: ET.Element, time: float) -> None:
    """``tests``, ``failures``, ``skipped`` and ``time`` of a testsuite(s) element, counted from its test cases."""
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    element.set("errors", "0")
    element.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    element.set("time", f"{time:.3f}")


def paths_in(directory: Path) -> ReportPaths:
    return ReportPaths(json=directory / "report.json", markdown=directory / "report.md",
                       junit=directory / "junit.xml", html=directory / "report.html")  # fmt: skip


def _write(data: Mapping[str, Any], directory: Path, title: str) -> ReportPaths:
    paths = paths_in(directory)
    write_atomic(paths.json, json.dumps(data, indent=2, sort_keys=True) + "\n")
    write_atomic(paths.markdown, markdown(data))
    write_atomic(paths.junit, junit(data))
    write_atomic(paths.html, report_html.page(data, title))
    return paths


def remove_stale(build: Path, plans: Sequence[Plan]) -> None:
    """Before a run: the summary and the own reports of the cells about to run go (a report on disk is never older
    than the cell's state); the other cells' reports stay, for the summary after the run."""
    for directory in (build, *(build / Path(plan.work_dir).name for plan in plans)):
        for path in dataclasses.astuple(paths_in(directory)):
            path.unlink(missing_ok=True)


def write(cells: Sequence[CellRun], build: Path) -> ReportPaths:
    """Each cell's own report in build/<cell-id>/, then the summary over every cell built in ``build``."""
    for cell in cells:
        entry = cell_entry(cell, build)
        _write(as_dict([entry]), build / entry["dir"], f"torchbuild: {entry['cell_id']}")
    return write_summary(build)


def write_summary(build: Path) -> ReportPaths:
    """build/report.* rebuilt from every cell's own report below ``build`` (its logs made relative to ``build``)."""
    entries = []
    for own in sorted(build.glob(f"*/{paths_in(build).json.name}")):
        try:
            cells = json.loads(own.read_text(encoding="utf-8"))["cells"]
        except (OSError, ValueError, KeyError, TypeError):
            console.print(f"[yellow]warning:[/] {escape(str(own))} is unreadable; the summary leaves it out.")
            continue
        for cell in cells:
            entries.append({**cell, "logs": [f"{own.parent.name}/{log}" for log in cell.get("logs", [])]})
    return _write(as_dict(entries), build, "torchbuild")


def unverified_reasons(record: StageRecord) -> list[str]:
    """What did not run in an unverified stage, once each: its unverified checks' code and message (the smoke's
    checks share one), else the stage's message."""
    said = [f"{c.code} {c.message}".strip() for c in record.checks if c.status == "unverified"]
    return list(dict.fromkeys(said)) or [record.message]


def print_summary(cells: Sequence[CellRun], paths: ReportPaths, install: Sequence[str] = ()) -> None:
    """The results, on stdout: each cell's stages and artifacts, the verdict, where the reports are, and how to
    install what was published (``install``)."""
    from rich.table import Table

    table = Table(title="summary", title_justify="left")
    for heading in ("cell", "torch", *(record.stage for record in cells[0].records)):
        table.add_column(heading, overflow="fold")  # a narrow terminal folds an id or a version, never cuts it
    for cell in cells:
        table.add_row(
            cell.plan.cell_id,
            cell.plan.version,
            *(f"{MARKS.get(r.status, r.status)} {r.duration:.0f}s" for r in cell.records),
        )
    out.print(table)
    for cell in cells:
        shown: set[Path] = set()
        for name, artifact in cell.artifacts.items():
            if artifact.path not in shown:  # a stage that passes its input through names the same file again
                shown.add(artifact.path)
                size = f"{artifact.size / 1e6:.1f} MB"
                out.print(f"  {escape(name):<15} {escape(str(artifact.path))}  {size}  sha256 {artifact.sha256}")
        for companion in cell.plan.companions:
            out.print(f"  {companion_line(companion, cell.artifacts)[1]}", markup=False)
    for cell in cells:
        for record in cell.unverified:
            for why in unverified_reasons(record):
                out.print(f"[yellow]unverified[/] {cell.plan.cell_id} / {record.stage}: {escape(why)}",
                          highlight=False, soft_wrap=True)  # fmt: skip
    status = run_status(c.status for c in cells)
    verdicts = {
        "passed": "[green]all cells passed[/]",
        "failed": "[red]some cells failed[/] (details above and in the report)",
        "unverified": f"[yellow]unverified[/]: {sum(c.status == 'unverified' for c in cells)} of {len(cells)} cells "
        "published unverified (a check could not run: see the lines above), none failed",
    }
    verdict = verdicts[status]
    shown_paths = ", ".join(str(p) for p in (paths.json, paths.markdown, paths.junit, paths.html))
    out.print(f"{verdict}; report of every cell in {paths.json.parent}: {escape(shown_paths)}")
    for line in install:
        out.print(line, markup=False)
