"""Where a cell's wheel came from, and the one time its artifacts carry: ``source.json``, the source stage's
``source_info`` output, read by the stages that write archives and by the SBOM.

The time is ``SOURCE_DATE_EPOCH`` when it is set (reproducible builds), else the source's own: the commit time of a
checkout, or the newest member time of an input wheel. Never the clock: a rebuild from the same inputs gives the
same bytes.
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from torchbuild.errors import UserError
from torchbuild.host.files import write_atomic

ENV = "SOURCE_DATE_EPOCH"


@dataclass(frozen=True)
class SourceInfo:
    kind: Literal["wheel", "checkout"]
    origin: str  # where pip found the wheel, the --wheel path, or the checkout ("<git url>@<ref>", a path)
    sha256: str  # of the input wheel as it came (before any relabelling); "" for a checkout
    commit: str  # the checkout's commit; "" for a wheel
    epoch: int  # seconds since 1970, UTC
    epoch_from: str  # what the time was taken from, for people

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def read(cls, path: Path) -> SourceInfo:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def environment_epoch() -> int | None:
    raw = os.environ.get(ENV)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{ENV}='{raw}' is not a number of seconds since 1970-01-01.") from None


def wheel_epoch(path: Path) -> tuple[int, str]:
    """The newest member time of a wheel, read as UTC (zip times carry no zone)."""
    with zipfile.ZipFile(path) as archive:
        times = [calendar.timegm((*info.date_time, 0, 0, 0)) for info in archive.infolist()]
    return max(times, default=0), f"the newest member of {path.name}"


def checkout_epoch(path: Path, commit: str) -> tuple[int, str]:
    """The commit time of a git checkout; outside git, the newest modification time of its files."""
    if commit:
        proc = subprocess.run(
            ["git", "-C", str(path), "log", "-1", "--format=%ct", commit], capture_output=True, text=True, check=False
        )
        if proc.returncode == 0 and proc.stdout.strip().isdigit():
            return int(proc.stdout.strip()), f"the commit time of {commit[:12]}"
    newest = max((p.stat().st_mtime for p in path.rglob("*") if p.is_file() and ".git" not in p.parts), default=0)
    return int(newest), f"the newest file of {path} (not a git checkout)"


def source_info(
    kind: Literal["wheel", "checkout"], origin: str, sha256: str, commit: str, own: tuple[int, str]
) -> SourceInfo:
    epoch = environment_epoch()
    if epoch is not None:
        return SourceInfo(kind, origin, sha256, commit, epoch, ENV)
    return SourceInfo(kind, origin, sha256, commit, own[0], own[1])
