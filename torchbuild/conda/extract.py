"""A conda package's files placed into a prefix where conda links them (py-rattler extracts the archive; its
``info/`` is no part of a prefix): the conda layout the win-64 checks under Wine run in."""

from __future__ import annotations

import shutil
from pathlib import Path

from torchbuild.conda import rattler_child
from torchbuild.conda.archive import check_unpacked_size
from torchbuild.errors import UserError

EXTRACT_TIMEOUT_S = 900.0


def extract_package(archive: Path, prefix: Path) -> None:
    """The package's files into ``prefix`` where conda links them (its ``info/`` is not part of a prefix)."""
    check_unpacked_size(archive)  # py-rattler would unpack a bomb in full
    staging = prefix.parent / f".{prefix.name}-package"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        rattler_child.call("extract", timeout=EXTRACT_TIMEOUT_S, archive=str(archive), dest=str(staging))
    except rattler_child.RattlerError as exc:
        raise UserError(f"cannot unpack {archive.name}: {exc}") from None
    shutil.rmtree(staging / "info", ignore_errors=True)
    for item in sorted(staging.rglob("*")):
        if item.is_file() or item.is_symlink():
            target = prefix / item.relative_to(staging)
            target.parent.mkdir(parents=True, exist_ok=True)
            item.replace(target)
    shutil.rmtree(staging, ignore_errors=True)
