"""Nightlies: which file is one, where a channel keeps them apart from releases, and which ones retention keeps.

A nightly is a file whose version has a ``.devN`` segment (``2.10.0.dev20251105+cpu``), read from the file's own
name: a wheel's name, or a conda package's ``<name>-<version>-<build>`` (which publish and index check against its
info/index.json, check C1106). Everything else (releases, release candidates, source builds ``a0+git<sha7>``) is a
release here: a release is never moved to the nightly places and never pruned.

Places, relative to the channel (as pytorch's own download.pytorch.org and its conda ``nightly`` label do):

  whl/simple/<project>/...               releases: ``pip install --index-url <channel>/whl/simple torch``
  whl/nightly/simple/<project>/...       nightlies: ``pip install --pre --index-url <channel>/whl/nightly/simple torch``
  <subdir>/...                           releases: ``conda install -c <channel> pytorch``
  label/nightly/<subdir>/...             nightlies: ``conda install -c <channel>/label/nightly pytorch``

Retention (``index --keep-nightlies N``) follows pytorch/test-infra's s3_management/manage.py: the nights of a
package are its versions without the local label (a night's +cpu and +cu126 wheels are one night), newest first;
unlike upstream, which hides the older ones from its index, the older ones are deleted. It counts per package and
platform: a wheel's project and tags, a conda package's name and subdir.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

LABEL = "nightly"  # the conda label, and the pip path's name
CONDA_ROOT = f"label/{LABEL}"  # a conda channel of its own below the channel
RELEASE_SIMPLE = "whl/simple"
NIGHTLY_SIMPLE = f"whl/{LABEL}/simple"


def version_of(filename: str) -> Version | None:
    """The version a wheel's or conda package's file name carries; None where it is not a PEP 440 version."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        stem = filename.removesuffix(".conda").removesuffix(".tar.bz2")
        parts = stem.rsplit("-", 2)
        return Version(parts[1]) if len(parts) == 3 else None
    except (InvalidVersion, InvalidWheelFilename):
        return None


def is_nightly(filename: str) -> bool:
    """The file is a nightly: its version has a .devN segment."""
    version = version_of(filename)
    return version is not None and version.is_devrelease


def simple_root(wheel_name: str) -> str:
    """The PEP 503 root a wheel is listed under."""
    return NIGHTLY_SIMPLE if is_nightly(wheel_name) else RELEASE_SIMPLE


def conda_root(package_name: str) -> str:
    """The conda channel (relative to the channel; "" the channel itself) a package is indexed in."""
    return CONDA_ROOT if is_nightly(package_name) else ""


def expired(paths: Iterable[str], keep: int) -> list[str]:
    """Of the nightly files at ``paths`` (relative POSIX paths in a channel: ``label/nightly/<subdir>/<package>``
    or ``whl/nightly/simple/<project>/<wheel>``), the ones older than the ``keep`` newest nights of their package
    and platform. Releases among ``paths`` are never returned."""
    if keep < 1:
        raise ValueError("keep at least one night")
    groups: dict[tuple[str, ...], dict[Version, list[str]]] = {}
    for path in paths:
        name = PurePosixPath(path).name
        version = version_of(name)
        if version is None or not version.is_devrelease:
            continue
        night = Version(version.public)
        groups.setdefault(_platform_of(path), {}).setdefault(night, []).append(path)
    old: list[str] = []
    for nights in groups.values():
        for night in sorted(nights, key=lambda v: (v.dev or 0, v), reverse=True)[keep:]:
            old += nights[night]
    return sorted(old)


def _platform_of(path: str) -> tuple[str, ...]:
    """What retention counts nights per: a wheel's project and tags, a conda package's subdir and name."""
    pure = PurePosixPath(path)
    if pure.name.endswith(".whl"):
        project, _, _, tags = parse_wheel_filename(pure.name)
        return ("wheel", str(project), *sorted(str(tag) for tag in tags))
    return ("conda", pure.parent.name, pure.name.rsplit("-", 2)[0])
