"""``report.html``: one self-contained page of a report (inline CSS and SVG, no script, nothing fetched): what
failed first, each failure's long output (a traceback, a log's tail) once and folded; the grid of cells by stages
coloured by status with their times; then each cell's timeline of its stages (they overlap), its artifacts (size,
sha256), the libraries its wheel vendors and those it declares, its checks by stage (folded where all passed) and
links to its logs (relative paths).

Every text on the page comes from wheels, tools and the user's files, so each is escaped here (``html.escape``); the
only markup is this module's. ``bench/corpus.py --html`` draws the corpus ledger with the same ``grid`` and
``document``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

from torchbuild.run.charts import Bar, seconds_text, timeline

# status -> CSS class: green, blue (reused), grey (skipped), red, pale (not run), amber (unverified); a history's
# white (a night that did not build the cell) and hatched (a night whose report could not be read)
CLASSES = {"passed": "passed", "cached": "cached", "skipped": "skipped", "failed": "failed", "not run": "notrun",
           "unverified": "unverified", "not built": "notbuilt", "unreadable": "unread"}  # fmt: skip
MARKS = {"passed": "✓", "cached": "↺", "skipped": "–", "failed": "✗", "not run": "·", "unverified": "⚠",
         "not built": "·", "unreadable": "?"}  # fmt: skip

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1f23; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #d0d7de; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.passed { background: #dafbe1; } td.cached { background: #ddf4ff; } td.skipped { background: #eaeef2; }
td.failed { background: #ffebe9; font-weight: bold; } td.unverified { background: #fff8c5; }
td.notrun { background: #fafbfc; color: #8c959f; } td.notbuilt { background: #fff; color: #8c959f; }
td.unread { background: repeating-linear-gradient(45deg, #fff, #fff 4px, #eaeef2 4px, #eaeef2 8px); }
td.first-red { outline: 3px solid #82071e; outline-offset: -3px; }
code, pre { font: 12px ui-monospace, monospace; } pre { background: #f6f8fa; padding: .5em; white-space: pre-wrap; }
.verdict.ok { color: #1a7f37; } .verdict.bad { color: #cf222e; }
.failure { border-left: 4px solid #cf222e; padding-left: .8em; margin: .8em 0; }
details { margin: .3em 0; } summary { cursor: pointer; } details > pre { margin: .3em 0 .3em 1em; }
details.checks > summary { font-weight: bold; }
td.said { white-space: pre-wrap; } details.checks td:nth-child(2) { white-space: nowrap; }
svg text { font: 11px system-ui, sans-serif; fill: #1b1f23; } svg text.axis { font-size: 10px; fill: #57606a; }
svg .tick { stroke: #eaeef2; } svg .line { fill: none; stroke: #8c959f; stroke-width: 1.2; }
svg .passed { fill: #2da44e; } svg .cached { fill: #54aeff; } svg .skipped { fill: #afb8c1; }
svg .failed { fill: #cf222e; } svg .notrun, svg .notbuilt { fill: #d0d7de; } svg .unverified { fill: #d4a72c; }
"""


@dataclass(frozen=True)
class Box:
    """One cell of a grid: its status (for the colour), its text and a tooltip."""

    status: str
    text: str
    tip: str = ""
    mark: str = ""  # one more CSS class (a history's first red night: "first-red")


def document(title: str, parts: Iterable[str], style: str = "") -> str:
    """A whole page: ``parts`` are HTML this module made (each text in them escaped); ``style`` is CSS beside
    this module's."""
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}{style}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table of texts (each escaped)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f'<table class="{escape(cls)}"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>'


def grid(corner: str, columns: Sequence[str], rows: Iterable[tuple[str, str, Sequence[Box]]]) -> str:
    """Rows (label, the anchor it links to or "", one Box per column), coloured by status."""
    head = f"<th>{escape(corner)}</th>" + "".join(f"<th>{escape(c)}</th>" for c in columns)
    lines = []
    for label, anchor, boxes in rows:
        name = f'<a href="#{escape(anchor)}">{escape(label)}</a>' if anchor else escape(label)
        cells = "".join(
            f'<td class="{escape(_classes(b))}" title="{escape(b.tip)}">{escape(b.text)}</td>' for b in boxes
        )
        lines.append(f"<tr><th>{name}</th>{cells}</tr>")
    return f'<table class="grid"><thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(lines) + "\n</tbody></table>"


def _classes(box: Box) -> str:
    return " ".join(c for c in (CLASSES.get(box.status, "notrun"), box.mark) if c)


def _box(stage: Mapping[str, Any]) -> Box:
    status = str(stage["status"])
    text = f"{MARKS.get(status, '?')} {float(stage.get('duration', 0)):.0f}s"
    return Box(status, text, str(stage.get("message", "")).splitlines()[0] if stage.get("message") else status)


SHOWN_LINES = 5  # a stage's message of more lines shows its first, the rest folded


def _folded(text: str) -> str:
    """``text``: its first line shown, the rest (a traceback, a log's tail) in a folded ``<details>``."""
    first, _, rest = text.strip("\n").partition("\n")
    if not rest.strip():
        return f"<pre>{escape(first)}</pre>"
    lines = len(rest.splitlines())
    return (f"<details><summary><code>{escape(first)}</code> ({lines} more line{'s' if lines > 1 else ''})"
            f"</summary><pre>{escape(rest)}</pre></details>")  # fmt: skip


def _without_outputs(message: str, checks: Sequence[Mapping[str, Any]]) -> str:
    """A failed stage's message with the long output of each of its failed ``checks`` (which the stage quotes) cut
    to its first line: each output is shown once, with its check."""
    for check in checks:
        said = str(check.get("message", ""))
        if "\n" in said.strip() and said in message:
            message = message.replace(said, said.splitlines()[0])
    return message


def _failure_anchor(cell_id: str, stage: str) -> str:
    return f"failed-{cell_id}-{stage}"


def _failures(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """What failed, first: each failed stage with its message, then each failed check, its output folded."""
    parts = []
    for cell in cells:
        for stage in cell["stages"]:
            checks = [c for c in stage.get("checks", []) if c["status"] == "failed"]
            if stage["status"] != "failed" and not checks:
                continue
            where = f"{cell['cell_id']} / {stage['stage']}"
            anchor = _failure_anchor(cell["cell_id"], stage["stage"])
            parts.append(f'<div class="failure" id="{escape(anchor)}"><h3>{escape(where)}</h3>')
            if stage["status"] == "failed":
                message = _without_outputs(str(stage["message"]), checks)
                short = len(message.strip().splitlines()) <= SHOWN_LINES
                parts.append(f"<pre>{escape(message.strip())}</pre>" if short else _folded(message))
            for check in checks:
                name = " ".join(str(part) for part in (check.get("code", ""), check["name"]) if part)
                file = f" ({check['file']})" if check.get("file") else ""
                parts.append(f"<p><b>{escape(name)}</b>{escape(file)}</p>")
                parts.append(_folded(str(check["message"])))
            parts.append("</div>")
    return ["<h2>Failures</h2>", *parts] if parts else []


def _timeline(cell: Mapping[str, Any]) -> str:
    """The cell's stages on one time axis, from each one's recorded start; said where the report has none."""
    stages = cell["stages"]
    if all(s.get("start") is None for s in stages):
        return "<p>no timeline: this report has no start times of its stages (an older torchbuild wrote it)</p>"
    bars = []
    for stage in stages:
        status, start, seconds = str(stage["status"]), stage.get("start"), float(stage.get("duration", 0))
        first = str(stage.get("message", "")).strip().split("\n")[0]
        when = f"{seconds_text(seconds)} from {seconds_text(float(start))}" if start is not None else "did not run"
        tip = f"{stage['stage']}: {status}, {when}" + (f"; {first}" if first else "")
        bars.append(Bar(stage["stage"], None if start is None else float(start), seconds,
                        CLASSES.get(status, "notrun") if start is not None else status, tip))  # fmt: skip
    return timeline(bars)


def _checks(cell: Mapping[str, Any]) -> list[str]:
    """The cell's checks by stage, each stage's folded where none failed or is unverified; a failed check's long
    output is under Failures (linked), not here again."""
    parts = []
    for stage in cell["stages"]:
        checks = stage.get("checks", [])
        if not checks:
            continue
        counts: dict[str, int] = {}
        for check in checks:
            counts[check["status"]] = counts.get(check["status"], 0) + 1
        said = ", ".join(f"{n} {status}" for status, n in counts.items())
        opened = " open" if set(counts) & {"failed", "unverified"} else ""
        rows = []
        for check in checks:
            message = str(check["message"])
            if check["status"] == "failed" and "\n" in message.strip():
                anchor = _failure_anchor(cell["cell_id"], stage["stage"])
                message_html = (f'{escape(message.splitlines()[0])} (<a href="#{escape(anchor)}">its whole output '
                                "under Failures</a>)")  # fmt: skip
            else:
                message_html = escape(message)
            status = str(check["status"])
            rows.append(f"<tr><td>{escape(check['name'])}</td><td class=\"{CLASSES.get(status, 'notrun')}\">"
                        f"{escape(MARKS.get(status, '?'))} {escape(status)}</td>"
                        f"<td>{escape(_seconds(check.get('duration'), check.get('timed_with')))}</td>"
                        f'<td class="said">{message_html}</td></tr>')  # fmt: skip
        head = "".join(f"<th>{h}</th>" for h in ("check", "status", "time", "message"))
        parts.append(f'<details class="checks"{opened}><summary>{escape(stage["stage"])}: {len(checks)} '
                     f"check{'s' if len(checks) > 1 else ''} ({escape(said)})</summary>"
                     f'<table class="checks"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
                     "</details>")  # fmt: skip
    return ["<h3>Checks</h3>", *parts] if parts else []


def _cell(cell: Mapping[str, Any]) -> list[str]:
    title = f"{cell['cell_id']}: torch {cell['torch']}, Python {cell['python']}, {cell['platform']}, {cell['cuda']}"
    parts = [f'<section id="{escape(cell["cell_id"])}">', f"<h2>{escape(title)}</h2>"]
    seconds = cell.get("seconds")
    took = f": {seconds_text(float(seconds))} from the first stage's start to the last one's end" if seconds else ""
    parts += [f"<h3>Timeline{escape(took)}</h3>", _timeline(cell)]
    files = files_of((cell["cell_id"], name, a) for name, a in cell["artifacts"].items())
    rows = [(", ".join(names), path, f"{int(a['size']) / 1e6:.1f} MB", str(a["sha256"]))
            for (_, path), (names, a) in files.items()]  # fmt: skip
    parts += ["<h3>Artifacts</h3>", table(("artifact", "file", "size", "sha256"), rows, "artifacts")]
    vendored = cell.get("vendored", [])
    parts.append("<h3>Vendored into the wheel</h3>")
    parts.append(table(("library",), [(v,) for v in vendored]) if vendored else "<p>none</p>")
    declared = cell.get("declared_libraries", [])
    parts.append("<h3>Declared libraries (from the wheel's requirements)</h3>")
    parts.append(table(("requirement",), [(d,) for d in declared]) if declared else "<p>none</p>")
    companions = cell.get("companions", [])
    if companions:
        parts += ["<h3>torchvision and torchaudio</h3>", table(("status", "line"),
                  [(c["status"], c["line"]) for c in companions])]  # fmt: skip
    parts += _checks(cell)
    logs = cell.get("logs", [])
    parts.append("<h3>Logs</h3>")
    links = "".join(f'<li><a href="{escape(quote(str(log)))}">{escape(str(log))}</a></li>' for log in logs)
    parts.append(f"<ul>{links}</ul>" if logs else "<p>none</p>")
    parts.append("</section>")
    return parts


def files_of(
    rows: Iterable[tuple[str, str, Mapping[str, Any]]],
) -> dict[tuple[str, str], tuple[list[str], Mapping[str, Any]]]:
    """(cell id, path) -> the artifact names of that file (a stage that passes its input on names it again), and
    its entry."""
    files: dict[tuple[str, str], tuple[list[str], Mapping[str, Any]]] = {}
    for cell_id, name, artifact in rows:
        files.setdefault((cell_id, str(artifact["path"])), ([], artifact))[0].append(name)
    return files


def _seconds(duration: Any, group: Any = None) -> str:
    """A check's seconds; those of the group it was made in, named, where it was not timed alone."""
    if duration is None:
        return "-"
    return f"{float(duration):.1f}s" + (f" (all of: {group})" if group else "")


def page(data: Mapping[str, Any], title: str = "torchbuild") -> str:
    """The page of a report.json (``report.as_dict``'s shape)."""
    cells = list(data["cells"])
    passed = sum(bool(c["ok"]) for c in cells)
    unverified = sum(c.get("status") == "unverified" for c in cells)
    ok = passed == len(cells) and bool(cells)
    also = f", {unverified} unverified (a check could not run)" if unverified else ""
    verdict = f'<p class="verdict {"ok" if ok else "bad"}">{passed} of {len(cells)} cells passed{also}</p>'
    stages = [s["stage"] for s in cells[0]["stages"]] if cells else []
    rows = [(c["cell_id"], c["cell_id"], [_box(s) for s in c["stages"]]) for c in cells]
    parts = [verdict, *_failures(cells), "<h2>Matrix</h2>", grid("cell", stages, rows)]
    for cell in cells:
        parts += _cell(cell)
    return document(title, parts)
