"""The nightly's closing summary: one Markdown table of every cell, from the reports its jobs uploaded; and the
corpus job's: which pairs of the night's slice passed, which failed and why.

    python scripts/ci_summary.py artifacts --cells "$BUILD_MATRIX_JSON" --publish success >> "$GITHUB_STEP_SUMMARY"
    python scripts/ci_summary.py artifacts --cells "$BUILD_MATRIX_JSON" --html report.html   # also the page
    python scripts/ci_summary.py artifacts --cells "$BUILD_MATRIX_JSON" --history history --keep 30   # tonight kept
    python scripts/ci_summary.py --corpus corpus.json >> "$GITHUB_STEP_SUMMARY"

``artifacts/report-<cell>/report.json`` are the build jobs' reports, ``artifacts/smoke-<cell>/report.json`` the GPU
smoke jobs'; a GPU smoke job's results of the smoke stages replace the build machine's (which had no GPU). A cell of
the matrix without a report is listed as such (its job failed before writing one, or ran out of time).

``--history DIR`` adds tonight to a history (``pipeline.py history DIR`` draws its page): ``DIR/<night>/report.json``,
a run's report.json with the GPU smoke results in place and the cells without a report named in ``no_report``;
``<night>`` is the UTC date and time (``--night`` names it otherwise: the history orders its nights by name), and
only the newest ``--keep`` nights stay.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torchbuild.host.files import write_atomic
from torchbuild.plan import SMOKE_STAGES
from torchbuild.run import report_html
from torchbuild.run.report import artifact_table, as_dict, icon


def read_reports(root: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """cell id -> its entry in the report.json files of the artifacts named <prefix><cell>."""
    cells: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob(f"{prefix}*/report.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"warning: {path}: unreadable report ({exc})", file=sys.stderr)
            continue
        for cell in report.get("cells", []):
            cells[cell["cell_id"]] = cell
    return cells


def stage_cell(stage: Mapping[str, Any]) -> str:
    return f"{icon(stage['status'])} {float(stage.get('duration', 0)) / 60:.0f} min"


def table(cells: Sequence[str], builds: Mapping[str, Any], smokes: Mapping[str, Any], publish: str) -> str:
    stages: list[str] = []
    for cell in builds.values():
        stages = [s["stage"] for s in cell["stages"]]
        break
    ok = 0
    rows = []
    for cell_id in cells:
        build = builds.get(cell_id)
        if build is None:
            rows.append(f"| `{cell_id}` | ❌ no report: the build job failed before writing one, or ran out of time |")
            continue
        by_stage = {s["stage"]: s for s in build["stages"]}
        smoke = smokes.get(cell_id)
        gpu = {s["stage"]: s for s in smoke["stages"] if s["stage"] in SMOKE_STAGES} if smoke else {}
        by_stage.update(gpu)
        judged = [s for s in by_stage.values() if s["stage"] != "publish"]  # the publish job publishes, not the cell
        passed = all(s["status"] in ("passed", "skipped", "cached") for s in judged)
        ok += passed
        row = [f"`{cell_id}`", str(build.get("torch", ""))]
        row += [stage_cell(by_stage[s]) if s in by_stage else "" for s in stages]
        row.append("GPU runner" if gpu else "build runner")
        rows.append("| " + " | ".join(row) + " |")
    header = ["cell", "torch", *stages, "smoke ran on"]
    lines = [
        f"## Nightly: {ok}/{len(cells)} cells passed; publish: {publish or 'not run'}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *rows,
    ]
    artifacts = [(c, n, a) for c in cells if c in builds for n, a in builds[c].get("artifacts", {}).items()]
    if artifacts:
        lines += ["", *artifact_table(artifacts)]
    return "\n".join(lines) + "\n"


def corpus_summary(results: Mapping[str, Any]) -> str:
    """bench/corpus.py's JSON as Markdown: the counts, each failed pair with why, then every pair's row."""
    entries = list(results.get("pairs", []))
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no pairs"
    lines = [f"## Corpus, slice {results.get('shard', '?')}: {shown} (of {len(entries)} pairs)", ""]
    failed = [e for e in entries if e["status"] in ("failed", "no report")]
    if failed:
        lines += ["Failed:", ""] + [f"- `{e['key']}`: {e['why']}" for e in failed] + [""]
    header = ["pair", "result", "OpenMP", "minutes"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for e in entries:
        mark = icon("passed" if e["status"] == "passed" else "failed" if e in failed else "skipped")
        omp = e.get("row", {}).get("OpenMP", "-")
        lines.append(f"| `{e['key']}` | {mark} {e['why']} | {omp} | {e.get('seconds', 0) / 60:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", type=Path, nargs="?", help="where the report-* and smoke-* artifacts are")
    parser.add_argument("--cells", help="the build matrix JSON ({'include': [{'cell': ...}, ...]})")
    parser.add_argument("--publish", default="", help="the publish job's result")
    parser.add_argument("--corpus", type=Path, help="bench/corpus.py's --json output: its summary instead")
    parser.add_argument("--html", type=Path, help="also write the page of every cell (report.html) here")
    parser.add_argument("--history", type=Path, help="add tonight's report.json to this history (a folder per night)")
    parser.add_argument("--night", help="tonight's folder in --history (default: the UTC date and time)")
    parser.add_argument("--keep", type=int, default=30, help="the newest nights kept in --history (default: 30)")
    args = parser.parse_args(argv)
    if args.corpus is not None:
        try:
            results = json.loads(args.corpus.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"## Corpus: no results ({args.corpus}: {exc})")
            return 1
        sys.stdout.write(corpus_summary(results))
        return 0
    if args.artifacts is None or args.cells is None:
        parser.error("the artifacts folder and --cells are required (or --corpus FILE)")
    try:
        cells = [entry["cell"] for entry in json.loads(args.cells)["include"]]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"error: --cells is not the build matrix JSON ({exc})", file=sys.stderr)
        return 2
    builds = read_reports(args.artifacts, "report-")
    smokes = read_reports(args.artifacts, "smoke-")
    sys.stdout.write(table(cells, builds, smokes, args.publish))
    merged = [merged_cell(builds[c], smokes.get(c)) for c in cells if c in builds]
    if args.html is not None:
        write_atomic(args.html, report_html.page({"cells": merged}, "torchbuild nightly"))
    if args.history is not None:
        night = args.night or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
        report = night_report(merged, [c for c in cells if c not in builds])
        (args.history / night).mkdir(parents=True, exist_ok=True)
        write_atomic(args.history / night / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
        for old in sorted(p for p in args.history.iterdir() if p.is_dir())[: -max(args.keep, 1)]:
            shutil.rmtree(old)
    return 0


def night_report(merged: Sequence[Mapping[str, Any]], no_report: Sequence[str]) -> dict[str, Any]:
    """The night's report.json: the merged cells as a run's report has them, and the cells without a report."""
    night = as_dict(merged)
    if no_report:
        night.update(ok=False, status="failed")
    return {**night, "no_report": list(no_report)}


def merged_cell(build: Mapping[str, Any], smoke: Mapping[str, Any] | None) -> dict[str, Any]:
    """A build job's cell with the GPU smoke job's results of the smoke stages in place of its own."""
    gpu = {s["stage"]: s for s in (smoke or {}).get("stages", []) if s["stage"] in SMOKE_STAGES}
    stages = [gpu.get(s["stage"], s) for s in build["stages"]]
    judged = {s["status"] for s in stages if s["stage"] != "publish"}  # the publish job publishes, not the cell
    status = "unverified" if "unverified" in judged else "passed"
    if judged - {"passed", "skipped", "cached", "unverified"}:
        status = "failed"
    return {**build, "stages": stages, "ok": status == "passed", "status": status}


if __name__ == "__main__":
    sys.exit(main())
