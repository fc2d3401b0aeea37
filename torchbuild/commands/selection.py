"""Which cells a command works on: the matrix as the command line amends it, and the cells its flags select."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from torchbuild.commands import values
from torchbuild.config import matrix as matrix_mod
from torchbuild.config import package_sources
from torchbuild.config.channel_spec import check_spec
from torchbuild.config.matrix import DECLARED_CHOICES, VENDOR_SUFFIX, Cell, Matrix
from torchbuild.errors import UserError, one_of
from torchbuild.host.platform import host_platform
from torchbuild.knowledge import datafiles
from torchbuild.knowledge.compat import PLATFORMS, load
from torchbuild.plan import Plan, resolve

SELECTION = "cell selection"  # the options every command that selects cells shares
MATRIX = "matrix.yaml"  # in the folder the user runs in; else torchbuild/data/matrix.yaml, the built-in default


def add_selectors(parser: argparse.ArgumentParser) -> None:
    """The options every command that selects cells shares (the group ``SELECTION``)."""
    group = parser.add_argument_group(SELECTION)
    group.add_argument(
        "--matrix",
        metavar="FILE",
        type=values.path,
        default=None,
        help="matrix file (default: matrix.yaml in this folder, else the one shipped with torchbuild)",
    )
    group.add_argument("--cuda", metavar="X.Y|cpu", type=values.text, help="CUDA version X.Y, or cpu")
    group.add_argument("--py", "--python", metavar="X.Y", dest="python", type=values.text, help="Python version X.Y")
    group.add_argument("--platform", metavar="|".join(PLATFORMS), type=values.text,
                       help=f"{one_of(PLATFORMS)} (default: this host's)")  # fmt: skip
    group.add_argument(
        "--torch",
        metavar="RELEASE|latest",
        type=values.text,
        help="torch release, or 'latest': the newest that supports the cell (default: the matrix's)",
    )
    group.add_argument(
        "--only", metavar="CELL_ID", type=values.text, help="one cell of the matrix by id (see 'matrix')"
    )
    group.add_argument("--msvc", metavar="TOOLSET", type=values.text, help="pin the MSVC toolset, e.g. 14.29 (win-64)")
    group.add_argument(
        "--packages",
        metavar="LIST",
        type=values.text,
        help="what each cell ships, e.g. torch,torchvision (default: the matrix's; without one, torch and each "
        "companion whose release pairs with it)",
    )
    group.add_argument(
        "--companion-source",
        metavar="NAME=DIR",
        action="append",
        type=values.text,
        default=[],
        help="compile this companion from the checkout DIR against each cell's torch, e.g. torchvision=~/src/vision "
        "(repeat for each; it ships, added to --packages)",
    )
    group.add_argument(
        "--companion-ref",
        metavar="NAME=REF",
        action="append",
        type=values.text,
        default=[],
        help="clone this tag, branch or commit of the companion's repository and compile it against each cell's "
        "torch, e.g. torchvision=v0.28.0",
    )
    group.add_argument(
        "--declared-libraries",
        metavar="|".join(DECLARED_CHOICES),
        type=values.text,
        help="the libraries a wheel's declared requirements install (mkl of torch 2.3.x on win-64): keep them as "
        "dependencies, or vendor them into a self-contained wheel (default: the matrix's, else upstream's: keep)",
    )


def default_platform() -> str:
    """The platform of a cell given without --platform: this host's, where PyTorch builds for it."""
    found = host_platform()
    if found == "win-32":
        raise UserError("PyTorch does not support 32-bit Windows: use 64-bit Windows and 64-bit Python.")
    if found not in PLATFORMS:
        raise UserError(f"No default platform for this host ({found}): pass --platform {one_of(PLATFORMS)}.")
    return found


SELECTORS = (("--cuda", "cuda"), ("--py", "python"), ("--platform", "platform"), ("--torch", "torch"))


def check_selection(args: argparse.Namespace) -> None:
    """Selection flags that contradict each other are usage errors, before the matrix is read."""
    if args.only is not None:
        also = [flag for flag, dest in SELECTORS if getattr(args, dest) is not None]
        if also:
            raise UserError(
                f"--only {args.only} names one cell of the matrix, with its platform, CUDA, Python and torch; "
                f"{one_of(also)} would be ignored. Give --only alone, or {one_of(also)} without --only."
            )


def default_matrix(folder: Path) -> Path:
    """The matrix a command reads without --matrix: ``folder``'s matrix.yaml, else the one shipped with torchbuild."""
    here = folder / MATRIX
    return here if here.is_file() else datafiles.file(MATRIX)


def load_matrix(args: argparse.Namespace) -> Matrix:
    check_selection(args)
    if args.declared_libraries is not None:  # before the matrix is read: a bad value names the valid ones
        matrix_mod.check_declared(args.declared_libraries, "--declared-libraries")
    path = args.matrix or default_matrix(Path.cwd())
    matrix = matrix_mod.with_packages(matrix_mod.load(path), args.packages)
    given = package_sources.from_command_line(args.companion_source, args.companion_ref)
    matrix = matrix_mod.with_package_sources(matrix, given)
    if args.msvc:
        matrix = replace(matrix, build=replace(matrix.build, msvc_toolset=args.msvc))
    if getattr(args, "channel", None) is not None:
        try:
            check_spec(args.channel)
        except UserError as exc:
            raise UserError(f"--channel: {exc}") from None
        matrix = replace(matrix, channel=args.channel)
    return matrix


def check_msvc(args: argparse.Namespace, cells: Sequence[Cell]) -> None:
    if args.msvc and not any(c.platform == "win-64" for c in cells):
        raise UserError(
            f"--msvc {args.msvc} pins the MSVC toolset of win-64 cells, and no selected cell is win-64 "
            f"({one_of(sorted({c.platform for c in cells}))}): add --platform win-64, or leave --msvc out."
        )


def select_cells(matrix: Matrix, args: argparse.Namespace) -> list[Cell]:
    cells = matrix_mod.with_declared_libraries(_select(matrix, args), args.declared_libraries)
    check_msvc(args, cells)
    return cells


def _select(matrix: Matrix, args: argparse.Namespace) -> list[Cell]:
    cells = matrix.cells()
    if not cells and (args.cuda is None or args.python is None):
        raise UserError(
            f"{matrix.path} has no cells: its exclude rules remove every platform x cuda x python combination and "
            "include adds none. Remove an exclude rule or add an include entry (or give --cuda and --py)."
        )
    if args.only:
        # <id>-vendor of a matrix cell that keeps: that cell, vendoring (the id a --declared-libraries vendor run got)
        chosen = [c for c in cells if c.id == args.only] or [
            replace(c, declared_libraries="vendor") for c in cells if c.point_id + VENDOR_SUFFIX == args.only
        ]
        if not chosen:
            raise UserError(f"No cell '{args.only}' in {matrix.path}. Valid cell ids: {one_of([c.id for c in cells])}.")
        return chosen
    if args.cuda is None and args.python is None and args.platform is None and args.torch is None:
        return cells
    platform = args.platform or default_platform()
    if args.cuda is not None and args.python is not None:
        for cell in cells:
            if (cell.platform, cell.cuda, cell.python) == (platform, args.cuda, args.python) and args.torch is None:
                return [cell]
        return [matrix.cell(platform=platform, cuda=args.cuda, python=args.python, torch=args.torch or matrix.torch)]
    wanted = {"platform": platform, "cuda": args.cuda, "python": args.python}
    chosen = [c for c in cells if all(v is None or getattr(c, k) == v for k, v in wanted.items())]
    if args.torch is not None:
        chosen = [replace(c, torch=args.torch) for c in chosen]
    if not chosen:
        described = ", ".join(f"{k} {v}" for k, v in wanted.items() if v is not None)
        raise UserError(
            f"No cell of {matrix.path} has {described}. Give both --cuda and --py to build a cell outside the "
            f"matrix, or choose one of: {one_of([c.id for c in cells])}."
        )
    return chosen


def resolve_all(matrix: Matrix, cells: Sequence[Cell]) -> list[Plan]:
    compat = load()
    plans = []
    for cell in cells:
        try:
            plans.append(resolve(cell, matrix, compat))
        except UserError as exc:
            if len(cells) == 1:
                raise
            raise type(exc)(f"cell {cell.id}: {exc}") from None
    return plans
