"""The one checked reader of archives the pipeline unpacks (wheels, the zips inside them, the tarballs of conda
packages): what they would unpack to is checked against two limits before anything is extracted, so a small file
that unpacks to gigabytes (a decompression bomb) fills no disk.

- the total unpacked size: at most TORCHBUILD_MAX_UNPACKED (8 GiB unless set; torch's CUDA wheels unpack to ~3 GiB);
- the ratio of unpacked to compressed size, of the whole archive and of each member of 1 MiB or more: at most
  TORCHBUILD_MAX_RATIO (100 unless set; torch's own wheels stay under 25);
- the number of members: at most TORCHBUILD_MAX_MEMBERS (100,000 unless set; torch's wheels hold about 12,500),
  so that countless empty members (each a file made) are refused too.

A zip's directory states every member's size and zipfile never inflates a member past it, so a zip is checked from
its directory alone. A tarball has no directory: its members' headers are counted as the stream reaches them, before
each member's data is read.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from torchbuild.config import environment
from torchbuild.errors import UserError

RATIO_FLOOR = 1 << 20  # below this, a member's (or an archive's) ratio fills no disk: small text files reach 30
T = TypeVar("T")


class TooLarge(UserError):
    """An archive that would unpack past a limit; the message names it, the limit and how to raise it."""


@dataclass(frozen=True)
class Limits:
    unpacked: int  # bytes
    ratio: float
    members: int = environment.MAX_MEMBERS_DEFAULT

    @classmethod
    def from_environment(cls) -> Limits:
        return cls(unpacked=environment.max_unpacked(), ratio=environment.max_ratio(),
                   members=environment.max_members())  # fmt: skip


def _gib(size: float) -> str:
    return f"{size / (1 << 30):.2f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MiB"


def _refuse(name: str, problem: str, variable: str, example: str) -> TooLarge:
    return TooLarge(
        f"{name} {problem}: refused as a decompression bomb; nothing was unpacked. If the archive is genuine, "
        f"raise the limit with {variable} (e.g. {variable}={example})."
    )


def _over_total(name: str, total: int, limits: Limits) -> TooLarge:
    return _refuse(
        name,
        f"would unpack to {_gib(total)}, more than the limit of {_gib(limits.unpacked)}",
        environment.MAX_UNPACKED,
        f"{max(2 * limits.unpacked, total + (1 << 30)) >> 30}GiB",
    )


def _over_ratio(name: str, what: str, unpacked: int, packed: int, limits: Limits) -> TooLarge:
    ratio = unpacked / max(packed, 1)
    return _refuse(
        name,
        f"{what} {_gib(unpacked)} from {_gib(packed)} ({ratio:.0f} times its compressed size, more than the limit "
        f"of {limits.ratio:g})",
        environment.MAX_RATIO,
        f"{int(ratio) + 1}",
    )


def _over_members(name: str, count: int, limits: Limits, at_least: bool = False) -> TooLarge:
    return TooLarge(
        f"{name} holds {'more than ' if at_least else ''}{count:,} members, more than the limit of "
        f"{limits.members:,}: refused (each member is a file made); nothing was unpacked. If the archive is "
        f"genuine, raise the limit with {environment.MAX_MEMBERS} (e.g. {environment.MAX_MEMBERS}="
        f"{max(2 * limits.members, count + 1)})."
    )


def check_zip(archive: zipfile.ZipFile, name: str, limits: Limits | None = None) -> None:
    """TooLarge when the zip ``archive`` (called ``name`` in the message) would unpack past a limit."""
    limits = limits or Limits.from_environment()
    infos = archive.infolist()
    if len(infos) > limits.members:
        raise _over_members(name, len(infos), limits)
    total = sum(info.file_size for info in infos)
    if total > limits.unpacked:
        raise _over_total(name, total, limits)
    for info in infos:
        if info.file_size >= RATIO_FLOOR and info.file_size > limits.ratio * max(info.compress_size, 1):
            raise _over_ratio(name, f"has a member {info.filename!r} that unpacks to", info.file_size,
                              info.compress_size, limits)  # fmt: skip
    check_total(name, total, sum(info.compress_size for info in infos), limits)


def check_total(
    name: str, total: int, packed: int, limits: Limits | None = None, what: str = "would unpack to"
) -> None:
    """TooLarge when an archive of ``packed`` bytes that unpacks to ``total`` bytes is past a limit."""
    limits = limits or Limits.from_environment()
    if total > limits.unpacked:
        raise _over_total(name, total, limits)
    if total >= RATIO_FLOOR and total > limits.ratio * max(packed, 1):
        raise _over_ratio(name, what, total, packed, limits)


def open_zip(source: Path | IO[bytes], name: str | None = None) -> zipfile.ZipFile:
    """``zipfile.ZipFile(source)`` for reading, checked (``check_zip``) before any member is read."""
    archive = zipfile.ZipFile(source)
    try:
        check_zip(archive, name or (source.name if isinstance(source, Path) else "the archive"))
    except BaseException:
        archive.close()
        raise
    return archive


def counted_tar(
    members: Iterable[tuple[T, tarfile.TarInfo]], name: str, packed: int, limits: Limits | None = None
) -> Iterator[tuple[T, tarfile.TarInfo]]:
    """A tar stream's members as they come, each counted before it is passed on (its data not yet read): TooLarge
    when the members so far would unpack past a limit of an archive of ``packed`` bytes."""
    limits = limits or Limits.from_environment()
    total = 0
    for count, item in enumerate(members, 1):
        if count > limits.members:
            raise _over_members(name, limits.members, limits, at_least=True)
        total += item[1].size
        check_total(name, total, packed, limits, "unpacks to at least")
        yield item
