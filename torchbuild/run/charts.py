"""The pages' charts as inline SVG (nothing fetched, no script): a timeline of bars that may overlap, and a sparkline
of one number night by night. Colours come from the page's CSS by status class (``report_html.STYLE``); every text is
escaped here; a tooltip is an SVG ``<title>``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

LABEL = 110  # px: the timeline's column of stage names
ROW = 18  # px: one timeline row
AXIS = 18  # px: the timeline's scale below its rows


@dataclass(frozen=True)
class Bar:
    """One row of a timeline: ``label`` from ``start`` for ``seconds``, coloured by ``status`` (a CSS class)."""

    label: str
    start: float | None  # None: it did not run (a row without a bar)
    seconds: float
    status: str
    tip: str = ""


@dataclass(frozen=True)
class Point:
    """One night of a sparkline: its value (None: none that night, a gap) and its dot's status class."""

    value: float | None
    status: str
    tip: str = ""


def _tick_step(total: float) -> float:
    """A round step for about 4 to 8 ticks over ``total`` seconds."""
    for step in (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400):
        if total / step <= 8:
            return step
    return total / 4


def seconds_text(seconds: float) -> str:
    """12s, 3m05s, 2h14m."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def timeline(bars: Sequence[Bar], width: int = 720) -> str:
    """The bars on one time axis from 0 to the last bar's end: stages that ran beside each other overlap."""
    end = max((b.start + b.seconds for b in bars if b.start is not None), default=0.0) or 1.0
    span = width - LABEL - 70  # room on the right for the last bar's seconds
    height = len(bars) * ROW + AXIS

    def x(seconds: float) -> float:
        return LABEL + seconds / end * span

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the stages">']  # fmt: skip
    step = _tick_step(end)
    for tick in (i * step for i in range(int(end / step + 1e-9) + 1)):
        parts.append(f'<line class="tick" x1="{x(tick):.1f}" y1="0" x2="{x(tick):.1f}" y2="{height - AXIS + 3}"/>')
        parts.append(f'<text class="axis" x="{x(tick):.1f}" y="{height - 4}" text-anchor="middle">'
                     f"{escape(seconds_text(tick))}</text>")  # fmt: skip
    for row, bar in enumerate(bars):
        y = row * ROW
        parts.append(f'<text class="label" x="{LABEL - 6}" y="{y + 13}" text-anchor="end">{escape(bar.label)}</text>')
        tip = f"<title>{escape(bar.tip or bar.label)}</title>"
        if bar.start is None:
            parts.append(f'<text class="axis" x="{LABEL + 4}" y="{y + 13}">{escape(bar.status)}{tip}</text>')
            continue
        left, wide = x(bar.start), max(bar.seconds / end * span, 2.0)  # a cached stage: a sliver, still seen
        parts.append(f'<rect class="{escape(bar.status)}" x="{left:.1f}" y="{y + 3}" width="{wide:.1f}" '
                     f'height="{ROW - 6}" rx="2">{tip}</rect>')  # fmt: skip
        parts.append(f'<text class="axis" x="{left + wide + 4:.1f}" y="{y + 13}">'
                     f"{escape(seconds_text(bar.seconds))}</text>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def sparkline(points: Sequence[Point], label: str, width: int = 180, height: int = 34) -> str:
    """``points`` left (oldest) to right (newest), scaled between their smallest and largest value; a night without
    a value is a gap in the line."""
    values = [p.value for p in points if p.value is not None]
    pad = 4
    parts = [f'<svg class="spark" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">']  # fmt: skip
    if not values:
        parts.append(f'<text class="axis" x="{pad}" y="{height / 2 + 4:.0f}">no value on any night</text></svg>')
        return "".join(parts)
    low, high = min(values), max(values)
    step = (width - 2 * pad) / max(len(points) - 1, 1)

    def xy(index: int, value: float) -> tuple[float, float]:
        share = (value - low) / (high - low) if high > low else 0.5
        return pad + index * step, height - pad - share * (height - 2 * pad)

    run: list[str] = []
    for index, point in enumerate([*points, Point(None, "")]):  # the sentinel ends the last run of the line
        if point.value is None:
            if len(run) > 1:
                parts.append(f'<polyline class="line" points="{" ".join(run)}"/>')
            run = []
            continue
        px, py = xy(index, point.value)
        run.append(f"{px:.1f},{py:.1f}")
    for index, point in enumerate(points):
        if point.value is not None:
            px, py = xy(index, point.value)
            parts.append(f'<circle class="{escape(point.status)}" cx="{px:.1f}" cy="{py:.1f}" r="2.6">'
                         f"<title>{escape(point.tip)}</title></circle>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
