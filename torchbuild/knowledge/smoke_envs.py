"""What a smoke environment gets besides the artifact and its declared requirements (torchbuild/data/smoke_envs.yaml):
numpy for the interop checks, pinned per torch/Python range with the reason, and what a release imports without
declaring it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles
from torchbuild.knowledge.compat import Rule

DATA_FILE = "smoke_envs.yaml"


@dataclass(frozen=True)
class Row:
    rule: Rule  # rule.value: the requirement
    wine: bool = False  # only for a win-64 environment under Wine

    def applies(self, platform: str, torch: str, cuda: str, python: str, under_wine: bool) -> bool:
        return (under_wine or not self.wine) and self.rule.applies(platform, torch, cuda, python)


@dataclass(frozen=True)
class Table:
    numpy: tuple[Row, ...]
    extra: tuple[Row, ...]


@dataclass(frozen=True)
class Wanted:
    requirement: str
    why: str


def _rows(raw: Any, key: str) -> tuple[Row, ...]:
    rows = []
    for row in raw.get(key) or []:
        text = str(row.get("requirement", ""))
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise UserError(f"torchbuild/data/{DATA_FILE}: {key}: invalid requirement {text!r}: {exc}") from None
        rule = Rule(value=text, when=dict(row.get("when") or {}), why=" ".join(str(row.get("why", "")).split()))
        rows.append(Row(rule=rule, wine=bool(row.get("wine", False))))
    return tuple(rows)


def _parse(raw: Mapping[str, Any]) -> Table:
    return Table(numpy=_rows(raw, "numpy"), extra=_rows(raw, "extra"))


def load() -> Table:
    return datafiles.table(DATA_FILE, _parse)


def wanted(platform: str, torch: str, cuda: str, python: str, *, under_wine: bool) -> tuple[Wanted, ...]:
    """numpy (the first row that applies) and every extra that applies, each with its reason."""
    table = load()
    found = []
    numpy = next((r for r in table.numpy if r.applies(platform, torch, cuda, python, under_wine)), None)
    if numpy is None:
        raise UserError(f"torchbuild/data/{DATA_FILE}: no numpy row applies to torch {torch}, Python {python}")
    found.append(Wanted(numpy.rule.value, numpy.rule.why))
    found += [
        Wanted(r.rule.value, r.rule.why) for r in table.extra if r.applies(platform, torch, cuda, python, under_wine)
    ]
    return tuple(found)
