"""What a nightly of the matrix costs in runner time: ``python pipeline.py matrix --estimate``.

The per-cell hours are data (``data/ci_estimates.yaml``, with its sources and uncertain figures, read by
knowledge/ci_estimates.py); this module
adds them up per runner and converts them to the minutes GitHub counts against a private repository's quota.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge.ci_estimates import DATA, Table, load_table
from torchbuild.knowledge.compat import CPU


@dataclass(frozen=True)
class CellEstimate:
    cell_id: str
    runner: str
    hours: float
    uncertain: bool
    smoke_hours: float  # on a self-hosted GPU runner; 0 for CPU cells


@dataclass(frozen=True)
class Estimate:
    cells: tuple[CellEstimate, ...]
    table: Table

    @property
    def overhead_hours(self) -> float:
        return self.table.overhead_jobs * self.table.overhead_hours_per_job

    def hours_by_runner(self) -> dict[str, float]:
        """Hosted hours per runner label (the build jobs plus the matrix/publish/summary jobs on ubuntu-latest)."""
        hours: dict[str, float] = {}
        for cell in self.cells:
            hours[cell.runner] = hours.get(cell.runner, 0.0) + cell.hours
        hours["ubuntu-latest"] = hours.get("ubuntu-latest", 0.0) + self.overhead_hours
        return hours

    @property
    def hosted_hours(self) -> float:
        return sum(self.hours_by_runner().values())

    @property
    def smoke_hours(self) -> float:
        return sum(c.smoke_hours for c in self.cells)

    def billed_minutes(self) -> int:
        """Minutes counted against a private repository's included minutes (runner minutes x multiplier)."""
        total = 0.0
        for runner, hours in self.hours_by_runner().items():
            total += hours * 60 * self.table.runners[runner].minute_multiplier
        return round(total)

    def over_limit(self) -> list[CellEstimate]:
        return [c for c in self.cells if c.hours > self.table.hosted_job_limit_hours]


def estimate(cells: Sequence[Mapping[str, str]], table: Table | None = None) -> Estimate:
    """``cells``: the include entries of ``matrix --github`` (cell, platform, cuda, runs-on)."""
    table = table or load_table()
    found = []
    for entry in cells:
        accelerator = "cpu" if entry["cuda"] == CPU else "cuda"
        key = (entry["platform"], accelerator)
        if key not in table.build_hours:
            known = [f"{p} {a}" for p, a in table.build_hours]
            raise UserError(
                f"{DATA}: no build_hours for {key[0]} {key[1]} (cell {entry['cell']}); it has {one_of(known)}."
            )
        if entry["runs-on"] not in table.runners:
            raise UserError(
                f"{DATA}: no runner '{entry['runs-on']}' (cell {entry['cell']}); it has {one_of(table.runners)}."
            )
        hours, uncertain = table.build_hours[key]
        found.append(
            CellEstimate(
                cell_id=entry["cell"],
                runner=entry["runs-on"],
                hours=hours,
                uncertain=uncertain,
                smoke_hours=0.0 if accelerator == "cpu" else table.smoke_hours,
            )
        )
    return Estimate(cells=tuple(found), table=table)


def for_github_matrix(payload: Mapping[str, object]) -> Estimate:
    """The estimate of the JSON that ``matrix --github`` prints (its ``include`` entries)."""
    include = payload.get("include")
    if not isinstance(include, list) or not all(isinstance(e, dict) for e in include):
        raise UserError("matrix --github: expected {'include': [{cell, platform, cuda, runs-on, ...}, ...]}.")
    return estimate([{str(k): str(v) for k, v in e.items()} for e in include])


def render(result: Estimate) -> str:
    """The per-cell table and the totals, as plain text (also pasted into the README)."""
    width = max([len(c.cell_id) for c in result.cells] + [4])
    lines = [f"{'cell':{width}}  {'runner':14} {'hours':>5}"]
    for cell in result.cells:
        mark = " ~" if cell.uncertain else ""
        lines.append(f"{cell.cell_id:{width}}  {cell.runner:14} {cell.hours:5.1f}{mark}")
    lines.append("")
    by_runner = result.hours_by_runner()
    parts = ", ".join(f"{hours:.1f} h on {runner}" for runner, hours in sorted(by_runner.items()))
    lines.append(f"total: {len(result.cells)} cells, {result.hosted_hours:.1f} hosted runner-hours per night ({parts})")
    lines.append(
        f"  incl. {result.overhead_hours:.1f} h for the matrix, publish and summary jobs; "
        f"plus {result.smoke_hours:.2f} h of GPU smoke jobs on self-hosted runners (not billed by GitHub)"
    )
    terms = " + ".join(
        f"{hours * 60:.0f} min x{result.table.runners[runner].minute_multiplier} ({runner})"
        for runner, hours in sorted(by_runner.items())
    )
    lines.append(
        f"billed minutes, private repository: {terms} = {result.billed_minutes()} minutes per night "
        "(GitHub's minute multipliers: Linux 1x, Windows 2x); public repositories: standard runners are free"
    )
    if any(c.uncertain for c in result.cells):
        lines.append(f"~ = uncertain estimate (sources: torchbuild/data/{DATA})")
    for cell in result.over_limit():
        lines.append(
            f"warning: {cell.cell_id} needs ~{cell.hours:.1f} h, over the {result.table.hosted_job_limit_hours:.0f} h "
            "limit of a job on a GitHub-hosted runner: give it a larger or self-hosted runner"
        )
    return "\n".join(lines)
