"""What the tables say a cell may be: a known Python of 3.5 or newer, a known CUDA, and a release that shipped the
cell's build (for ``latest``, the newest that did). Each refusal names the valid choices."""

from __future__ import annotations

import re
from dataclasses import replace

from torchbuild.config.matrix import LATEST, Cell
from torchbuild.errors import UserError, one_of, some_of
from torchbuild.knowledge.compat import CPU, Compat, CudaRelease, TorchRelease, version_key

PYTHON_MIN = (3, 5)


def check_python(compat: Compat, python: str) -> None:
    if not re.fullmatch(r"\d+\.\d+", python):
        raise UserError(f"Python version '{python}' is not of the form X.Y (e.g. 3.11).")
    if python.startswith("2."):
        raise UserError(
            "Python 2 is not supported: PyTorch never shipped Python 2 builds for Windows and dropped them on "
            "Linux after 1.4. Use Python 3.5 or newer."
        )
    if version_key(python) < PYTHON_MIN:
        raise UserError(f"Python {python} is too old: PyTorch needs Python >= 3.5.")
    known = compat.python_versions()
    if python not in known:
        valid = [p for p in known if not p.startswith("2.")]
        raise UserError(f"No PyTorch release supports Python {python}. Valid: {one_of(valid)}.")


def check_cuda(compat: Compat, cuda: str) -> CudaRelease | None:
    if cuda == CPU:
        return None
    if cuda not in compat.cuda:
        raise UserError(f"Unknown CUDA version '{cuda}'. Valid: {one_of([CPU, *compat.cuda_versions()])}.")
    return compat.cuda[cuda]


def supporting(compat: Compat, cell: Cell) -> list[TorchRelease]:
    return [r for r in compat.releases if r.supports(cell.platform, cell.cuda, cell.python)]


def what_is_supported(compat: Compat, cell: Cell) -> str:
    """A hint for a cell no release supports: the Pythons that do go with this CUDA, and the releases."""
    accel = "CPU" if cell.cuda == CPU else f"CUDA {cell.cuda}"
    with_cuda = [r for r in compat.releases if cell.cuda in getattr(r.platforms.get(cell.platform), "cuda", ())]
    if not with_cuda:
        return f"No release shipped {accel} for {cell.platform}."
    pythons = sorted({p for r in with_cuda for p in r.platforms[cell.platform].python}, key=version_key)
    names = [r.version for r in with_cuda]
    span = names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"
    return f"{accel} on {cell.platform} shipped in torch {span}, for Python {one_of(pythons)}."


def resolve_release(compat: Compat, cell: Cell, pinned: str | None = None) -> TorchRelease:
    if pinned is not None:
        return resolve_release(compat, replace(cell, torch=pinned))
    if cell.torch == LATEST:
        found = supporting(compat, cell)
        if not found:
            accel = "CPU" if cell.cuda == CPU else f"CUDA {cell.cuda}"
            raise UserError(
                f"No PyTorch release supports {cell.platform} with {accel} and Python {cell.python}. "
                + what_is_supported(compat, cell)
            )
        return found[-1]
    release = compat.release(cell.torch)
    if release is None:
        versions = [r.version for r in compat.releases]
        raise UserError(
            f"Unknown torch release '{cell.torch}'. Known releases: {versions[0]} to {versions[-1]} "
            f"(torchbuild/data/releases.yaml), or 'latest'."
        )
    if not release.supports(cell.platform, cell.cuda, cell.python):
        accel = "CPU" if cell.cuda == CPU else f"CUDA {cell.cuda}"
        others = [r.version for r in supporting(compat, cell)]
        that_do = f"Releases that do: {some_of(others)}." if others else what_is_supported(compat, cell)
        raise UserError(
            f"torch {release.version} has no {cell.platform} build for {accel} with Python {cell.python}. " + that_do
        )
    return release
