"""The nights of a nightly read back from their reports: each cell's status night by night (passed, failed,
unverified, not built), since when a cell has been red, and the numbers its charts draw (the wheel's and the conda
package's size, the cell's time and each stage's).

A history is a folder with a folder per night, each holding that night's ``report.json`` (a run's ``build/report.json``,
or the nightly's, ``scripts/ci_summary.py --history``). The nights are in the order of their folders' names (the nightly
names them by the UTC date and time: an unreadable report says no time). A night whose report cannot be read is
kept, and says why; it neither ends nor starts a cell's streak of failures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchbuild.config import nesting
from torchbuild.errors import UserError, os_error

REPORT = "report.json"
NOT_BUILT = "not built"  # the night's report has no entry for the cell
UNREAD = "unreadable"  # the night's report could not be read: nothing is known of the cell that night
STATUSES = ("passed", "failed", "unverified", NOT_BUILT, UNREAD)
SIZES = {"wheel": "repaired_wheel", "conda": "conda_package"}  # chart -> torch's artifact of that kind
RAN = ("passed", "failed", "unverified", "skipped")  # a stage that ran: its time is charted (not cached, not run)
NO_REPORT = "no report: the build job failed before writing one, or ran out of time"


@dataclass(frozen=True)
class CellNight:
    """One cell on one night."""

    status: str  # one of STATUSES
    torch: str = ""
    why: str = ""  # failed: the first failed stage and its message's first line; unreadable: why
    sizes: Mapping[str, int] = field(default_factory=dict)  # "wheel", "conda" -> bytes
    seconds: Mapping[str, float] = field(default_factory=dict)  # "total" (start to end) and each stage that ran


@dataclass(frozen=True)
class Night:
    name: str  # its folder's name
    report: Path
    started: str = ""  # the earliest start of its cells, ISO 8601 UTC; "" where its report does not say
    cells: Mapping[str, CellNight] = field(default_factory=dict)
    problem: str = ""  # why its report could not be read; "" when it was

    def cell(self, cell_id: str) -> CellNight:
        if self.problem:
            return CellNight(UNREAD, why=self.problem)
        return self.cells.get(cell_id, CellNight(NOT_BUILT))


@dataclass(frozen=True)
class History:
    nights: tuple[Night, ...]  # oldest first
    cell_ids: tuple[str, ...]  # every cell any night built, sorted

    @property
    def tonight(self) -> Night:
        return self.nights[-1]

    def statuses(self, cell_id: str) -> list[str]:
        return [night.cell(cell_id).status for night in self.nights]

    def red_since(self, cell_id: str) -> Night | None:
        """The first night of the failures the cell's newest result ends (None when that result is not a failure).
        Nights that did not build the cell, or could not be read, neither end nor start such a streak."""
        first = None
        for night in reversed(self.nights):
            status = night.cell(cell_id).status
            if status in (NOT_BUILT, UNREAD):
                continue
            if status != "failed":
                break
            first = night
        return first

    def red_nights(self, cell_id: str) -> int:
        """How many nights the cell failed on since ``red_since``."""
        since = self.red_since(cell_id)
        if since is None:
            return 0
        later = self.nights[self.nights.index(since):]
        return sum(night.cell(cell_id).status == "failed" for night in later)

    def broke_tonight(self) -> list[str]:
        """The cells that failed tonight and had not failed the last night that built them (or were new)."""
        return [c for c in self.cell_ids if self.red_since(c) is self.tonight]

    def still_red(self) -> list[str]:
        """The cells that failed tonight and before."""
        return [c for c in self.cell_ids if self.red_since(c) not in (None, self.tonight)]


def read(directory: Path) -> History:
    """The history in ``directory``; UserError (bad input) when it is not a folder of nights, or no night of it can
    be read."""
    if not directory.is_dir():
        what = "is a file" if directory.exists() else "does not exist"
        raise UserError(f"{directory} {what}: {layout(directory)}")
    try:
        folders = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError as exc:
        raise UserError(f"{directory} cannot be read ({os_error(exc)}).") from None
    if not folders:
        raise UserError(f"{directory} has no nights: {layout(directory)}")
    nights = [read_night(folder) for folder in folders]
    if all(night.problem for night in nights):
        said = "; ".join(f"{night.report}: {night.problem}" for night in nights[:3])
        more = f" (and {len(nights) - 3} more)" if len(nights) > 3 else ""
        raise UserError(f"no night in {directory} has a readable {REPORT}: {said}{more}. {layout(directory)}")
    cell_ids = sorted({cell_id for night in nights for cell_id in night.cells})
    return History(nights=tuple(nights), cell_ids=tuple(cell_ids))


def layout(directory: Path) -> str:
    return (f"give a folder with a folder per night, each holding that night's {REPORT} "
            f"(e.g. {directory / '2026-11-28' / REPORT}, a copy of a run's build/{REPORT})")  # fmt: skip


def read_night(folder: Path) -> Night:
    """The night of ``folder``: its report read, or the reason it could not be."""
    path = folder / REPORT
    try:
        raw = nesting.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Night(folder.name, path, problem=f"no {REPORT}")
    except OSError as exc:
        return Night(folder.name, path, problem=f"cannot be read ({os_error(exc)})")
    except UnicodeDecodeError as exc:
        return Night(folder.name, path, problem=f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    except ValueError as exc:
        return Night(folder.name, path, problem=f"not JSON ({exc})")
    try:
        return _night(folder.name, path, raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return Night(folder.name, path, problem=f"not a torchbuild report ({type(exc).__name__}: {exc})")


def _night(name: str, path: Path, raw: Any) -> Night:
    entries = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ValueError("expected an object whose 'cells' is a list")
    cells = {str(entry["cell_id"]): cell_night(entry) for entry in entries}
    for cell_id in raw.get("no_report", []):  # the nightly's cells whose build job wrote no report
        cells.setdefault(str(cell_id), CellNight("failed", why=NO_REPORT))
    starts = [str(entry["started"]) for entry in entries if entry.get("started")]
    return Night(name, path, started=min(starts, default=""), cells=cells)


def cell_night(entry: Mapping[str, Any]) -> CellNight:
    """A cell of a report.json (``report.cell_entry``'s shape)."""
    status = str(entry.get("status") or ("passed" if entry["ok"] else "failed"))
    if status not in STATUSES[:3]:
        raise ValueError(f"cell {entry['cell_id']!r} has the status {status!r}")
    stages: Sequence[Mapping[str, Any]] = entry["stages"]
    failed = next((s for s in stages if s["status"] == "failed"), None)
    why = ""
    if failed is not None:
        lines = str(failed.get("message", "")).strip().splitlines()
        first = lines[0] if lines else "failed"
        why = first if first.startswith(f"{failed['stage']}:") else f"{failed['stage']}: {first}"
    artifacts = entry.get("artifacts", {})
    sizes = {chart: int(artifacts[name]["size"]) for chart, name in SIZES.items() if name in artifacts}
    seconds = {str(s["stage"]): float(s["duration"]) for s in stages if s["status"] in RAN}
    if entry.get("seconds") is not None:  # not in the reports of older torchbuilds (the stages' sum would overlap)
        seconds["total"] = float(entry["seconds"])
    return CellNight(status, str(entry.get("torch", "")), why, sizes, seconds)
