"""Solving conda specs with py-rattler against local and real channels, with explicit virtual packages.

Used by the verify stage (``pytorch`` with the cell's Python must resolve to the package just built) and by tests
of CPU vs CUDA selection. Nothing is downloaded: channels are directories (``file://``) or URLs the caller gives.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.conda import rattler_child
from torchbuild.errors import UserError, one_of
from torchbuild.host.files import link

# The virtual packages a solve assumes for each platform, as a user's machine would report them. __glibc 2.28 is
# the floor of the manylinux_2_28 wheels torch 2.6+ ships; __cuda is added for CUDA cells (the driver's CUDA).
VIRTUAL_PACKAGES: Mapping[str, Mapping[str, str]] = {
    "linux-64": {"__unix": "0", "__linux": "5.15", "__glibc": "2.28"},
    "win-64": {"__win": "0"},
}


@dataclass(frozen=True)
class Solved:
    """One package of a solution."""

    name: str
    version: str
    build: str
    build_number: int
    subdir: str
    channel: str
    file_name: str
    url: str

    def __str__(self) -> str:
        return f"{self.name}-{self.version}-{self.build} ({self.subdir}, {self.channel})"


class Unsolvable(UserError):
    """The specs have no solution; the message is the solver's explanation."""


class ChannelUnreachable(UserError):
    """A channel's repodata could not be fetched (no network, DNS, a proxy, a timeout); the message says why."""


# The live channels a solve without stored repodata reads (packaging.yaml solve_channels names them).
CHANNEL_URLS: Mapping[str, str] = {
    "conda-forge": "https://conda.anaconda.org/conda-forge",
    "main": "https://repo.anaconda.com/pkgs/main",
}


def virtual_packages_for(platform: str, cuda: str | None = None) -> dict[str, str]:
    """Virtual packages of a typical machine of ``platform``; with ``cuda`` (e.g. "12.4") a driver for it."""
    if platform not in VIRTUAL_PACKAGES:
        raise UserError(f"no virtual packages known for platform '{platform}'; valid: {one_of(VIRTUAL_PACKAGES)}.")
    packages = dict(VIRTUAL_PACKAGES[platform])
    if cuda and cuda != "cpu":
        packages["__cuda"] = cuda
    return packages


def channel_url(channel: str | os.PathLike[str]) -> str:
    """A channel directory as a file:// URL; URLs and channel names pass through."""
    text = os.fspath(channel)
    if "://" in text:
        return text
    path = Path(text)
    if path.is_absolute() or text.startswith("."):
        return path.resolve().as_uri()
    return text


def make_local_channel(packages: Sequence[Path], directory: Path) -> Path:
    """A channel in ``directory`` holding exactly ``packages`` (hard-linked when possible; copies on Windows),
    indexed by rattler.

    The subdir of each package comes from its own info/index.json.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for package in packages:
        subdir = directory / str(rattler_child.call("package_subdir", path=str(package)))
        subdir.mkdir(parents=True, exist_ok=True)
        target = subdir / package.name
        target.unlink(missing_ok=True)
        if os.name == "nt":
            # A hard link shares the package's file: on Windows deleting this channel fails ("Sharing violation",
            # seen under Wine) while another stage has the package open, as smoke-conda beside verify does.
            shutil.copyfile(package, target)
        else:
            link(package, target)
    (directory / "noarch").mkdir(parents=True, exist_ok=True)
    rattler_child.call("index", directory=str(directory), write_zst=False)
    return directory


def solve(
    channels: Sequence[str | os.PathLike[str]],
    specs: Sequence[str],
    platform: str,
    virtual_packages: Mapping[str, str],
    *,
    cache_dir: Path | None = None,
    timeout_s: float = 120.0,
) -> list[Solved]:
    """Solve ``specs`` for ``platform`` (+ noarch) with strict channel priority, first channel first.

    ``channels`` are directories, file:// or https:// URLs. Raises Unsolvable with the solver's explanation.
    """
    from rattler import MatchSpec
    from rattler.exceptions import InvalidMatchSpecError

    try:
        for spec in specs:
            MatchSpec(spec, strict=False)
    except InvalidMatchSpecError as exc:
        raise UserError(f"invalid conda spec in {list(specs)}: {exc}") from None

    def run(cache: Path) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = rattler_child.call(
            "solve",
            sources=[channel_url(c) for c in channels],
            specs=list(specs),
            platform=platform,
            virtual_packages=dict(virtual_packages),
            cache_dir=str(cache),
            timeout_s=timeout_s,
        )
        return records

    try:
        if cache_dir is not None:
            records = run(cache_dir)
        else:
            # A fresh cache per solve: a local channel rewritten in place must never be answered from a cache.
            with tempfile.TemporaryDirectory(prefix="torchbuild-solve-") as tmp:
                records = run(Path(tmp))
    except rattler_child.RattlerError as exc:
        if exc.kind == "SolverError":
            raise Unsolvable(str(exc)) from None
        if exc.kind in ("GatewayError", "timeout"):
            lines = [line.removeprefix("Caused by: ").strip() for line in str(exc).splitlines() if line.strip()]
            raise ChannelUnreachable(" / ".join(dict.fromkeys(lines[:1] + lines[-1:]))) from None
        raise
    return sorted((Solved(**r) for r in records), key=lambda s: s.name)
