"""Give a wheel a local version label (torch 2.5.1 -> 2.5.1+cpu) without recompressing it.

PyPI's win_amd64 torch wheels are the CPU builds under the plain release version; the cell's wheel is named with
its variant (``2.5.1+cpu``) so that a channel can hold the CPU and CUDA builds side by side. Only the .dist-info
changes (its directory name, METADATA's Version, RECORD); every other member's compressed bytes are copied as they
are (rewrite.py), which takes seconds where recompressing a 1 GB payload takes minutes.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import parse_wheel_filename

from torchbuild.host import archives
from torchbuild.wheel.rewrite import RewriteError, rewrite


class VersionError(ValueError):
    """The wheel cannot be re-versioned; the message names the file."""


def set_version(wheel: Path, dest_dir: Path, version: str) -> Path:
    """Write ``wheel`` with version ``version`` into ``dest_dir``; return the new wheel's path. A build number (PyPI's
    re-upload torch-2.10.0-3-...) is dropped from the name and from WHEEL: it numbered uploads of the old version."""
    name, old_version, _, _ = parse_wheel_filename(wheel.name)
    stem = name.replace("-", "_")
    old_dist = f"{stem}-{old_version}.dist-info"
    new_dist = f"{stem}-{version}.dist-info"
    parts = wheel.name.split("-")
    dest = dest_dir / "-".join([parts[0], version.replace("-", "_"), *parts[-3:]])
    with archives.open_zip(wheel) as source:
        if f"{old_dist}/METADATA" not in source.namelist():
            raise VersionError(f"{wheel}: no {old_dist}/METADATA and RECORD")
        metadata = source.read(f"{old_dist}/METADATA").decode("utf-8")
        info = source.read(f"{old_dist}/WHEEL").decode("utf-8") if f"{old_dist}/WHEEL" in source.namelist() else None
    files = {f"{new_dist}/METADATA": metadata}
    if info is not None and re.search(r"^Build: ", info, flags=re.MULTILINE):
        files[f"{new_dist}/WHEEL"] = re.sub(r"^Build: .*\n", "", info, flags=re.MULTILINE)
    files[f"{new_dist}/METADATA"], count = re.subn(
        r"^Version: .*$", f"Version: {version}", metadata, count=1, flags=re.MULTILINE
    )
    if count != 1:
        raise VersionError(f"{wheel}: {old_dist}/METADATA has no Version field")

    def renamed(member: str) -> str:
        return new_dist + member[len(old_dist) :] if member.startswith(old_dist + "/") else member

    try:
        return rewrite(wheel, dest, files={k: v.encode("utf-8") for k, v in files.items()}, rename=renamed)
    except RewriteError as exc:
        raise VersionError(str(exc).replace("RECORD is missing", "METADATA and RECORD")) from None
