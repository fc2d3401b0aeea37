"""A cell's keep | vendor choice for the libraries its torch wheel leaves to declared requirements (matrix.yaml
``declared_libraries``; upstream's choice and where vendoring is refused: torchbuild/data/cuda_wheels.yaml, read by
knowledge/cuda_wheels.py), and the requirement wheels it keeps or vendors (a Plan fact)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from torchbuild.config.matrix import Cell
from torchbuild.errors import UserError
from torchbuild.knowledge import pypi_to_conda
from torchbuild.knowledge.cuda_wheels import (
    PINNED_IN,
    CudaWheels,
    DeclaredLibraries,
    RequirementWheel,
    declared_libraries,
    load,
)


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What the repair does with a cell's declared libraries (matrix.yaml ``declared_libraries``): keep them as
    dependencies or vendor them, and what upstream's wheels of the platform do."""

    choice: DeclaredLibraries
    upstream: DeclaredLibraries

    @property
    def vendor(self) -> bool:
        return self.choice == "vendor"

    @property
    def said(self) -> str:
        """How the plan says it: "keep, upstream's choice", "vendor; upstream keeps them"."""
        if self.choice == self.upstream:
            return f"{self.choice}, upstream's choice"
        return f"{self.choice}; upstream {'keeps' if self.upstream == 'keep' else 'vendors'} them"


def choose(
    platform: str,
    cuda: str,
    asked: DeclaredLibraries | None,
    wheels: Sequence[RequirementWheel],
    data: CudaWheels | None = None,
) -> Choice:
    """``asked`` (keep | vendor; None: not set) for a cell of ``platform`` and ``cuda`` whose declared requirements
    are ``wheels``; unset, upstream's choice for the platform. Vendoring is refused (UserError naming the valid
    choice) where the data says the platform's cells cannot, for a cell with declared libraries or a CUDA cell (any
    of its releases may take CUDA from requirements)."""
    data = data or load()
    upstream = data.upstream_choice.get(platform, "keep")
    choice = Choice(choice=asked or upstream, upstream=upstream)
    if choice.vendor and (wheels or cuda != "cpu") and platform in data.vendor_refused:
        names = ", ".join(w.pin for w in wheels[:3]) + (" ..." if len(wheels) > 3 else "") or f"CUDA {cuda}"
        raise UserError(
            f"declared_libraries 'vendor' is refused for {platform} ({names}): "
            f"{data.vendor_refused[platform]} The valid choice there is 'keep' (upstream's, the default; {PINNED_IN})."
        )
    return choice


class CellLibraries(NamedTuple):
    """A cell's declared libraries under its keep | vendor choice: those left to the requirements, those vendored."""

    kept: tuple[RequirementWheel, ...]
    vendored: tuple[RequirementWheel, ...]
    choice: Choice


def cell_libraries(cell: Cell, release: str) -> CellLibraries:
    """The declared libraries of ``cell`` with torch ``release``, for its platform and Python, kept or vendored as the
    cell says (its declared_libraries, which its id carries; unset: upstream's choice), refused as ``choose`` says."""
    markers = pypi_to_conda.marker_environment(cell.platform, cell.python)
    declared = declared_libraries(cell.platform, release, cell.cuda, markers)
    choice = choose(cell.platform, cell.cuda, cell.declared_libraries, declared)
    return CellLibraries((), declared, choice) if choice.vendor else CellLibraries(declared, (), choice)
