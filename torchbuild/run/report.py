"""The run's report: JSON, Markdown (also for $GITHUB_STEP_SUMMARY) and JUnit XML, each written atomically."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any

from rich.markup import escape

from torchbuild.config.pairing import Companion
from torchbuild.host.console import MARKS, console
from torchbuild.host.files import write_atomic
from torchbuild.results import Artifact
from torchbuild.run.records import CellRun, StageRecord
from torchbuild.stages import companion_artifact


@dataclass(frozen=True)
class ReportPaths:
    json: Path
    markdown: Path
    junit: Path


def run_status(cells: Sequence[CellRun]) -> str:
    """The run's: failed (a cell failed), unverified (none failed, one is unverified) or passed."""
    statuses = {c.status for c in cells}
    return next((s for s in ("failed", "unverified") if s in statuses), "passed")


def as_dict(cells: Sequence[CellRun]) -> dict[str, Any]:
    # "ok" only for a cell every check of which ran and passed: an unverified cell is not ok ("status" says which)
    return {
        "ok": run_status(cells) == "passed",
        "status": run_status(cells),
        "cells": [
            {
                "cell_id": c.plan.cell_id,
                "ok": c.status == "passed",
                "status": c.status,
                "torch": c.plan.version,
                "platform": c.plan.platform,
                "python": c.plan.python,
                "cuda": c.plan.cuda,
                "stages": [r.to_dict() for r in c.records],
                "artifacts": {name: a.to_dict() for name, a in c.artifacts.items()},
                "companions": [_companion(companion, c.artifacts) for companion in c.plan.companions],
            }
            for c in cells
        ],
    }


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


def artifact_table(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Markdown rows ``| cell | artifact | size | sha256 |`` of report.json artifact entries, each file once."""
    lines = ["| cell | artifact | size | sha256 |", "|---|---|---|---|"]
    seen: set[tuple[str, str]] = set()
    for cell_id, artifact in rows:
        name = PureWindowsPath(str(artifact["path"])).name  # a report from a Windows job has '\\' paths
        if (cell_id, name) not in seen:
            seen.add((cell_id, name))
            lines.append(f"| `{cell_id}` | `{name}` | {int(artifact['size']) / 1e6:.1f} MB | `{artifact['sha256']}` |")
    return lines


def markdown(cells: Sequence[CellRun]) -> str:
    data = as_dict(cells)
    stages = [s["stage"] for s in data["cells"][0]["stages"]]
    lines = ["## torchbuild", "", "| cell | torch | status | " + " | ".join(stages) + " |"]
    lines.append("|" + "---|" * (3 + len(stages)))
    for cell in data["cells"]:
        row = [f"`{cell['cell_id']}`", cell["torch"], f"{icon(cell['status'])} {cell['status']}"]
        row += [f"{icon(s['status'])} {s['duration']:.0f}s" for s in cell["stages"]]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", *artifact_table((c["cell_id"], a) for c in data["cells"] for a in c["artifacts"].values())]
    companions = [(c["cell_id"], companion["line"]) for c in data["cells"] for companion in c["companions"]]
    if companions:
        lines += ["", "### torchvision and torchaudio", ""]
        lines += [f"- {cell_id}: {line}" for cell_id, line in companions]
    ran_on = [(c["cell_id"], s) for c in data["cells"] for s in c["stages"] if s.get("ran_on")]
    if ran_on:
        lines += ["", "### Where the checks ran", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['status']} {s['ran_on']}" for cell_id, s in ran_on]
    problems = [(c["cell_id"], s) for c in data["cells"] for s in c["stages"] if s["status"] == "failed"]
    if problems:
        lines += ["", "### Failures", ""]
        for cell_id, stage in problems:
            lines += [f"**{cell_id} / {stage['stage']}**", "", "```", stage["message"], "```", ""]
    unverified = [(c["cell_id"], s) for c in data["cells"] for s in c["stages"] if s["status"] == "unverified"]
    if unverified:
        lines += ["", "### Unverified (published, but a check could not run)", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['message']}" for cell_id, s in unverified]
    skipped = [
        (c["cell_id"], s) for c in data["cells"] for s in c["stages"] if s["status"] == "skipped" and s["message"]
    ]
    if skipped:
        lines += ["", "### Skipped", ""]
        lines += [f"- {cell_id} / {s['stage']}: {s['message']}" for cell_id, s in skipped]
    return "\n".join(lines) + "\n"


def junit(cells: Sequence[CellRun]) -> str:
    suites = ET.Element("testsuites", name="torchbuild")
    for cell in cells:
        cases = [(r.stage, r) for r in cell.records]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=cell.plan.cell_id,
            tests=str(len(cases) + sum(len(r.checks) for r in cell.records)),
            failures=str(sum(r.status == "failed" for r in cell.records)),
            skipped=str(sum(r.status in ("skipped", "not run", "unverified") for r in cell.records)),
            time=f"{sum(r.duration for r in cell.records):.3f}",
        )
        for stage, record in cases:
            case = ET.SubElement(
                suite, "testcase", classname=cell.plan.cell_id, name=stage, time=f"{record.duration:.3f}"
            )
            if record.status == "failed":
                ET.SubElement(
                    case, "failure", message=record.message.splitlines()[0] if record.message else "failed"
                ).text = record.message
            elif record.status in ("skipped", "not run", "unverified"):
                ET.SubElement(case, "skipped", type=record.status, message=record.message or record.status)
            if record.ran_on:
                properties = ET.SubElement(case, "properties")
                ET.SubElement(properties, "property", name="ran_on", value=record.ran_on)
                ET.SubElement(case, "system-out").text = record.message
            for check in record.checks:
                sub = ET.SubElement(suite, "testcase", classname=f"{cell.plan.cell_id}.{stage}", name=check.name)
                if check.status == "failed":
                    ET.SubElement(sub, "failure", message=f"{check.code} {check.message}".strip()).text = check.file
                elif check.status in ("skipped", "unverified"):
                    ET.SubElement(sub, "skipped", type=check.status, message=check.message)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def paths_in(directory: Path) -> ReportPaths:
    return ReportPaths(json=directory / "report.json", markdown=directory / "report.md", junit=directory / "junit.xml")


def write(cells: Sequence[CellRun], directory: Path) -> ReportPaths:
    paths = paths_in(directory)
    write_atomic(paths.json, json.dumps(as_dict(cells), indent=2, sort_keys=True) + "\n")
    write_atomic(paths.markdown, markdown(cells))
    write_atomic(paths.junit, junit(cells))
    return paths


def unverified_reasons(record: StageRecord) -> list[str]:
    """What did not run in an unverified stage, once each: its unverified checks' code and message (the smoke's
    checks share one), else the stage's message."""
    said = [f"{c.code} {c.message}".strip() for c in record.checks if c.status == "unverified"]
    return list(dict.fromkeys(said)) or [record.message]


def print_summary(cells: Sequence[CellRun], paths: ReportPaths) -> None:
    from rich.table import Table

    table = Table(title="summary", title_justify="left")
    table.add_column("cell")
    table.add_column("torch")
    for record in cells[0].records:
        table.add_column(record.stage)
    for cell in cells:
        table.add_row(
            cell.plan.cell_id,
            cell.plan.version,
            *(f"{MARKS.get(r.status, r.status)} {r.duration:.0f}s" for r in cell.records),
        )
    console.print(table)
    for cell in cells:
        shown: set[Path] = set()
        for name, artifact in cell.artifacts.items():
            if artifact.path not in shown:  # a stage that passes its input through names the same file again
                shown.add(artifact.path)
                size = f"{artifact.size / 1e6:.1f} MB"
                console.print(f"  {escape(name):<15} {artifact.path}  {size}  sha256 {artifact.sha256}")
        for companion in cell.plan.companions:
            console.print(f"  {companion_line(companion, cell.artifacts)[1]}", markup=False, highlight=False)
    for cell in cells:
        for record in cell.unverified:
            for why in unverified_reasons(record):
                console.print(f"[yellow]unverified[/] {cell.plan.cell_id} / {record.stage}: {escape(why)}",
                              highlight=False, soft_wrap=True)  # fmt: skip
    status = run_status(cells)
    verdicts = {
        "passed": "[green]all cells passed[/]",
        "failed": "[red]some cells failed[/] (details above and in the report)",
        "unverified": f"[yellow]unverified[/]: {sum(c.status == 'unverified' for c in cells)} of {len(cells)} cells "
        "published unverified (a check could not run: see the lines above), none failed",
    }
    console.print(f"{verdicts[status]}; report: {paths.json}, {paths.markdown}, {paths.junit}")
