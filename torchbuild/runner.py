"""Runs the stages of each Plan in order (placeholder until the stages land)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.plan import STAGES, Plan


def run(plans: Sequence[Plan], root: Path, wheel: Path | None = None, force: bool = False) -> int:
    raise UserError(f"stage '{STAGES[0]}' is not implemented yet.")
