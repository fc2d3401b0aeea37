"""Where a cell's wheel came from, and the one time its artifacts carry: ``source.json``, the source stage's
``source_info`` output, read by the stages that write archives and by the SBOM.

The time is ``SOURCE_DATE_EPOCH`` when it is set (reproducible builds), else the source's own: the commit time of a
checkout, or the newest member time of an input wheel. Never the clock: a rebuild from the same inputs gives the
same bytes.
"""

from __future__ import annotations

import calendar
import json
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from torchbuild.config import environment, nesting
from torchbuild.errors import UserError
from torchbuild.host import archives, signals
from torchbuild.host.files import write_atomic

ENV = environment.SOURCE_DATE_EPOCH
EARLIEST, LATEST = environment.EARLIEST, environment.LATEST  # the times a zip member can carry


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
        """The file the source stage wrote; UserError naming it when it is not one (edited, or another version's)."""
        try:
            raw = nesting.loads(path.read_text(encoding="utf-8"))
            info = cls(**raw)
        except (OSError, ValueError, TypeError) as exc:
            raise UserError(f"{path}: not a source.json of this torchbuild ({exc}); rerun with --force") from None
        texts = (info.origin, info.sha256, info.commit, info.epoch_from)
        if info.kind not in ("wheel", "checkout") or not all(isinstance(t, str) for t in texts) or not (
            isinstance(info.epoch, int) and EARLIEST <= info.epoch <= LATEST
        ):
            raise UserError(f"{path}: not a source.json of this torchbuild (a field of the wrong type or range); "
                            "rerun with --force")  # fmt: skip
        return info


def environment_epoch() -> int | None:
    """SOURCE_DATE_EPOCH, checked (config/environment.py)."""
    return environment.source_date_epoch()


def within_zip_times(own: tuple[int, str]) -> tuple[int, str]:
    """A source's own time moved into the range an archive can carry (a checkout committed before 1980)."""
    epoch, said = own
    if EARLIEST <= epoch <= LATEST:
        return own
    return min(max(epoch, EARLIEST), LATEST), f"{said}, moved into 1980-2107 (what a zip can carry)"


def wheel_epoch(path: Path, archive: zipfile.ZipFile | None = None) -> tuple[int, str]:
    """The newest member time of a wheel, read as UTC (zip times carry no zone); ``archive``: the wheel as its caller
    opened it."""
    if archive is None:
        with archives.open_zip(path) as opened:
            return wheel_epoch(path, opened)
    times = [calendar.timegm((*info.date_time, 0, 0, 0)) for info in archive.infolist()]
    return max(times, default=0), f"the newest member of {path.name}"


def checkout_epoch(path: Path, commit: str) -> tuple[int, str]:
    """The commit time of a git checkout; outside git, the newest modification time of its files."""
    if commit:
        proc = signals.run(
            ["git", "-C", str(path), "log", "-1", "--format=%ct", commit],
            capture_output=True, text=True, errors="replace", check=False,
        )  # fmt: skip
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
    epoch, said = within_zip_times(own)
    return SourceInfo(kind, origin, sha256, commit, epoch, said)
