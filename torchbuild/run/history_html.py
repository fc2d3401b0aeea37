"""The nightly page of a history (``history.History``): one self-contained page (inline CSS and SVG, no script,
nothing fetched), drawn with report.html's look (``report_html``).

First what tonight says: which cells broke tonight, which are still red and since when, which are green again, and
the nights that could not be read. Then the grid of cells by nights, coloured by status, each cell's first red night
outlined, with the night it has been red since. Then each cell's trends night by night: its wheel's and conda
package's size, its time from start to end and each stage's, as small charts with tonight's value and its change from
the night before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from torchbuild.run.charts import Point, seconds_text, sparkline
from torchbuild.run.history import NOT_BUILT, UNREAD, CellNight, History
from torchbuild.run.report_html import MARKS, Box, document, grid

# a change from the night before shown in bold (red: grew, green: shrank): a size's by more than 5 %, a time's by
# more than half of it
SIZE_CHANGE = 0.05
TIME_CHANGE = 0.5
STYLE = """
section.trend { display: inline-block; vertical-align: top; margin: 0 2em 1em 0; }
table.trend td, table.trend th { vertical-align: middle; } td.grew { font-weight: bold; color: #cf222e; }
td.shrank { font-weight: bold; color: #1a7f37; }
ul.said li { margin: .2em 0; } .note { color: #57606a; }
"""


def counted(n: int, thing: str) -> str:
    """'1 night', '3 nights'."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _mb(value: float) -> str:
    return f"{value / 1e6:.1f} MB"


def _night_box(history: History, cell_id: str, index: int) -> Box:
    night = history.nights[index]
    cell = night.cell(cell_id)
    since = history.red_since(cell_id)
    tip = f"{cell_id} on {night.name}: {cell.status}"
    tip += f", torch {cell.torch}" if cell.torch else ""
    tip += f"; {cell.why}" if cell.why else ""
    first = since is night
    text = MARKS.get(cell.status, "?") + (" first red" if first else "")
    return Box(cell.status, text, tip + ("; the first night of its failures" if first else ""),
               "first-red" if first else "")  # fmt: skip


def _since_box(history: History, cell_id: str) -> Box:
    since = history.red_since(cell_id)
    if since is None:
        last = next((n.cell(cell_id) for n in reversed(history.nights)
                     if n.cell(cell_id).status not in (NOT_BUILT, UNREAD)), None)  # fmt: skip
        # white, as a night that did not build it: nothing to say
        return Box("not built", "-", f"not red: {last.status if last else 'never built'} the last night that built it")
    return Box("failed", f"{since.name} ({counted(history.red_nights(cell_id), 'night')})", since.cell(cell_id).why)


def _cells_grid(history: History) -> str:
    columns = [n.name + (" (unreadable)" if n.problem else "") for n in history.nights]
    rows = []
    for cell_id in history.cell_ids:
        boxes = [_night_box(history, cell_id, i) for i in range(len(history.nights))]
        rows.append((cell_id, f"trend-{cell_id}", [*boxes, _since_box(history, cell_id)]))
    return grid("cell", [*columns, "red since"], rows)


def _tonight(history: History) -> list[str]:
    """What tonight says, in words: its counts, what broke, what is still red, what is green again."""
    tonight = history.tonight
    parts = [f"<p>{counted(len(history.nights), 'night')}, {escape(history.nights[0].name)} to "
             f"{escape(tonight.name)}; {counted(len(history.cell_ids), 'cell')}.</p>"]  # fmt: skip
    if tonight.problem:
        parts.append(f'<p class="verdict bad">Tonight ({escape(tonight.name)}): its report could not be read: '
                     f"{escape(tonight.problem)} ({escape(str(tonight.report))}).</p>")  # fmt: skip
    else:
        counts: dict[str, int] = {}
        for cell_id in history.cell_ids:
            status = tonight.cell(cell_id).status
            counts[status] = counts.get(status, 0) + 1
        said = ", ".join(f"{n} {status}" for status, n in counts.items())
        ok = "ok" if not counts.get("failed") else "bad"
        parts.append(f'<p class="verdict {ok}">Tonight ({escape(tonight.name)}): {escape(said)}.</p>')
    broke = history.broke_tonight()
    if broke:
        parts.append("<h2>Broke tonight</h2>")
        parts.append(_said([(c, tonight.cell(c).why) for c in broke]))
    still = history.still_red()
    if still:
        parts.append("<h2>Still red</h2>")
        rows = []
        for cell_id in still:
            since, count = history.red_since(cell_id), history.red_nights(cell_id)
            assert since is not None
            rows.append((cell_id, f"red since {since.name} ({counted(count, 'night')}): {tonight.cell(cell_id).why}"))
        parts.append(_said(rows))
    green = [c for c in history.cell_ids if _green_again(history, c)]
    if green:
        parts.append("<h2>Green again tonight</h2>")
        parts.append(_said([(c, f"{tonight.cell(c).status} tonight, failed the night before") for c in green]))
    unread = [n for n in history.nights if n.problem]
    if unread:
        parts.append("<h2>Nights whose report could not be read</h2>")
        parts.append(_said([(n.name, f"{n.report}: {n.problem}") for n in unread], anchor=False))
    return parts


def _green_again(history: History, cell_id: str) -> bool:
    built = [s for s in history.statuses(cell_id)[:-1] if s not in (NOT_BUILT, UNREAD)]
    tonight = history.tonight.cell(cell_id).status
    return tonight in ("passed", "unverified") and bool(built) and built[-1] == "failed"


def _said(rows: Sequence[tuple[str, str]], anchor: bool = True) -> str:
    items = "".join(
        (f'<li><a href="#trend-{escape(name)}">{escape(name)}</a>: ' if anchor else f"<li>{escape(name)}: ")
        + f"{escape(text)}</li>"
        for name, text in rows
    )
    return f'<ul class="said">{items}</ul>'


def _change(values: Sequence[float | None], show: Callable[[float], str], bold_over: float, ratio: bool) -> str:
    """Tonight's value against the night before that had one: "+40.2 MB (+19%)" or "x2.1"."""
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(known) < 2 or known[-1][0] != len(values) - 1:
        return "<td>-</td>"
    before, now = known[-2][1], known[-1][1]
    if before == 0:
        return "<td>-</td>"
    if now == before:
        return "<td>same</td>"
    share = (now - before) / before
    sign = "+" if now >= before else "-"
    text = f"x{now / before:.2f}" if ratio else f"{sign}{show(abs(now - before))} ({share:+.1%})"
    big = f' class="{"grew" if share > 0 else "shrank"}"' if abs(share) > bold_over else ""
    return f"<td{big}>{escape(text)}</td>"


def _trend_row(history: History, cell_id: str, label: str, value: Callable[[CellNight], float | None],
               show: Callable[[float], str], bold_over: float, ratio: bool) -> str:  # fmt: skip
    cells = [night.cell(cell_id) for night in history.nights]
    values = [value(c) for c in cells]
    points = [Point(v, c.status, f"{n.name}: {show(v) if v is not None else 'none'} ({c.status})")
              for n, c, v in zip(history.nights, cells, values, strict=True)]  # fmt: skip
    now = values[-1]
    return (f"<tr><th>{escape(label)}</th><td>{sparkline(points, f'{cell_id}: {label}')}</td>"
            f"<td>{escape(show(now)) if now is not None else '-'}</td>"
            f"{_change(values, show, bold_over, ratio)}</tr>")  # fmt: skip


def _stage_time(stage: str) -> Callable[[CellNight], float | None]:
    return lambda cell: cell.seconds.get(stage)


def _trends(history: History, cell_id: str) -> list[str]:
    since = history.red_since(cell_id)
    red = f" (red since {since.name})" if since is not None else ""
    parts = [f'<section class="trend" id="trend-{escape(cell_id)}"><h3>{escape(cell_id + red)}</h3>']
    head = "<tr><th></th><th>night by night</th><th>tonight</th><th>change</th></tr>"
    rows = [
        _trend_row(history, cell_id, "wheel", lambda c: c.sizes.get("wheel"), _mb, SIZE_CHANGE, False),
        _trend_row(history, cell_id, "conda package", lambda c: c.sizes.get("conda"), _mb, SIZE_CHANGE, False),
        _trend_row(history, cell_id, "time", lambda c: c.seconds.get("total"), seconds_text, TIME_CHANGE, True),
    ]
    parts.append(f'<table class="trend"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>')
    stages = list(dict.fromkeys(s for n in history.nights for s in n.cell(cell_id).seconds if s != "total"))
    stage_rows = [_trend_row(history, cell_id, stage, _stage_time(stage), seconds_text, TIME_CHANGE, True)
                  for stage in stages]  # fmt: skip
    if stage_rows:
        parts.append(f"<details><summary>each stage's time ({len(stages)} stages)</summary>"
                     f'<table class="trend"><thead>{head}</thead><tbody>{"".join(stage_rows)}</tbody></table>'
                     "</details>")  # fmt: skip
    parts.append("</section>")
    return parts


def page(history: History, title: str = "torchbuild nightly history") -> str:
    parts = [*_tonight(history), "<h2>Cells by night</h2>", _cells_grid(history)]
    parts.append('<p class="note">Each box: the cell that night (hover for why). Outlined: the first night of the '
                 "failures the cell is in now. White: not built that night; hatched: that night's report could not "
                 "be read.</p>")  # fmt: skip
    parts.append("<h2>Trends</h2>")
    parts.append('<p class="note">Oldest night on the left. A dot is coloured by the cell\'s status that night; a '
                 "gap is a night without a value. Time: from the cell's first stage's start to its last one's end "
                 "(stages run beside each other); each stage's time only where it ran (not cached).</p>")  # fmt: skip
    for cell_id in history.cell_ids:
        parts += _trends(history, cell_id)
    return document(title, parts, STYLE)
