"""``report.html``: one self-contained page of a report (inline CSS, no script, nothing fetched): the grid of cells
by stages coloured by status with their times, what failed first with its messages, then each cell's artifacts
(size, sha256), the libraries its wheel vendors and those it declares, and links to its logs (relative paths).

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

# status -> CSS class: green, blue (reused), grey (skipped), red, pale (not run), amber (unverified)
CLASSES = {"passed": "passed", "cached": "cached", "skipped": "skipped", "failed": "failed", "not run": "notrun",
           "unverified": "unverified"}  # fmt: skip
MARKS = {"passed": "✓", "cached": "↺", "skipped": "–", "failed": "✗", "not run": "·", "unverified": "⚠"}

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1b1f23; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #d0d7de; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.passed { background: #dafbe1; } td.cached { background: #ddf4ff; } td.skipped { background: #eaeef2; }
td.failed { background: #ffebe9; font-weight: bold; } td.unverified { background: #fff8c5; }
td.notrun { background: #fafbfc; color: #8c959f; }
code, pre { font: 12px ui-monospace, monospace; } pre { background: #f6f8fa; padding: .5em; white-space: pre-wrap; }
.verdict.ok { color: #1a7f37; } .verdict.bad { color: #cf222e; }
.failure { border-left: 4px solid #cf222e; padding-left: .8em; margin: .8em 0; }
"""


@dataclass(frozen=True)
class Box:
    """One cell of a grid: its status (for the colour), its text and a tooltip."""

    status: str
    text: str
    tip: str = ""


def document(title: str, parts: Iterable[str]) -> str:
    """A whole page: ``parts`` are HTML this module made (each text in them escaped)."""
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
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
            f'<td class="{CLASSES.get(b.status, "notrun")}" title="{escape(b.tip)}">{escape(b.text)}</td>'
            for b in boxes
        )
        lines.append(f"<tr><th>{name}</th>{cells}</tr>")
    return f'<table class="grid"><thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(lines) + "\n</tbody></table>"


def _box(stage: Mapping[str, Any]) -> Box:
    status = str(stage["status"])
    text = f"{MARKS.get(status, '?')} {float(stage.get('duration', 0)):.0f}s"
    return Box(status, text, str(stage.get("message", "")).splitlines()[0] if stage.get("message") else status)


def _failures(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """What failed, first: each failed stage with its message, then each failed check with its own."""
    parts = []
    for cell in cells:
        for stage in cell["stages"]:
            checks = [c for c in stage.get("checks", []) if c["status"] == "failed"]
            if stage["status"] != "failed" and not checks:
                continue
            where = f"{cell['cell_id']} / {stage['stage']}"
            parts.append(f'<div class="failure"><h3>{escape(where)}</h3>')
            if stage["status"] == "failed":
                parts.append(f"<pre>{escape(str(stage['message']))}</pre>")
            if checks:
                rows = [(c.get("code", ""), c["name"], c.get("file", ""), c["message"]) for c in checks]
                parts.append(table(("code", "check", "file", "message"), rows, "checks"))
            parts.append("</div>")
    return ["<h2>Failures</h2>", *parts] if parts else []


def _cell(cell: Mapping[str, Any]) -> list[str]:
    title = f"{cell['cell_id']}: torch {cell['torch']}, Python {cell['python']}, {cell['platform']}, {cell['cuda']}"
    parts = [f'<section id="{escape(cell["cell_id"])}">', f"<h2>{escape(title)}</h2>"]
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
    checks = [(s["stage"], c) for s in cell["stages"] for c in s.get("checks", [])]
    if checks:
        timed = [(stage, c["name"], c["status"], _seconds(c.get("duration"), c.get("timed_with")), c["message"])
                 for stage, c in checks]  # fmt: skip
        parts += ["<h3>Checks</h3>", table(("stage", "check", "status", "time", "message"), timed, "checks")]
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
