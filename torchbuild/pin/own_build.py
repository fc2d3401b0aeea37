"""The pin step for the users' own builds: the version a ``--wheel``, a checkout or ``--build-version`` says, and the
release whose facts it takes (config/build_version.py).

A wheel's version is its file name's (its torch/version.py must agree, and its ``cuda`` must be the cell's). A
checkout's is version.txt plus ``+git<sha7>`` of its HEAD, as upstream's ``tools/generate_torch_version.py`` makes it
without ``PYTORCH_BUILD_VERSION``; ``--build-version`` replaces either. A release's own wheel or checkout is not an own
build: it keeps the release's road (its version is ``<release>+<label>``). A version whose release contradicts an
explicitly requested ``--torch`` is refused with both named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torchbuild.config import build_version
from torchbuild.config.build_version import OwnBuild
from torchbuild.config.environment import source_date_epoch
from torchbuild.config.matrix import LATEST, Cell
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.host import checkout
from torchbuild.knowledge.compat import CPU, Compat
from torchbuild.wheel import version_py
from torchbuild.wheel.wheelfile import WheelError


@dataclass(frozen=True)
class Pin:
    """What the pin step chose for a cell: the release whose facts it takes (None: the cell names it), and for an
    own build its version and origin; ``said``: the line the run prints about it."""

    release: str | None
    own: OwnBuild | None = None
    said: str = ""


def pin(cell: Cell, options: RunOptions, compat: Compat) -> Pin | None:
    """The Pin of an own build; None where the source is upstream's release (or names no version: the source
    stage says what is wrong with it)."""
    found = _version_of_source(cell, options, compat)
    if found is None:
        return None
    version, origin = found
    if origin != "--build-version" and not _own(compat, version):
        return None
    facts = build_version.facts_of(compat, version)
    release = facts.release.version
    if cell.torch != LATEST and release != cell.torch:
        raise UserError(
            f"{origin} is torch {version} ({facts.why}), but --torch {cell.torch} was asked for: give "
            f"--torch {release} (or leave --torch out), or a source of torch {cell.torch}."
        )
    label = cell.cuda if cell.cuda == CPU else ""
    kept = str(version) if version.local else f"{version} (+ the cell's label{f' {label}' if label else ''})"
    own = OwnBuild(version=str(version), origin=origin, facts=facts.why)
    return Pin(release, own, said=f"{origin}: {facts.why}; its version {kept} is kept")


def _own(compat: Compat, version: Version) -> bool:
    """Not upstream's release build: a pre-release, nightly or dev version, one the tables do not know, or a label
    other than an accelerator's (a fork's, a source build's +git<sha>)."""
    if not build_version.is_release(compat, version) or version.post is not None:
        return True
    return version.local is not None and not build_version.accelerator_label(version.local)


def _version_of_source(cell: Cell, options: RunOptions, compat: Compat) -> tuple[Version, str] | None:
    if options.build_version == build_version.NIGHTLY:
        return _nightly(options, compat)
    if options.build_version is not None:
        return build_version.parse(options.build_version, "--build-version"), "--build-version"
    if options.wheel is not None:
        return _wheel_version(options.wheel, cell)
    if options.source_kind != "pytorch":
        return None
    if options.source_dir is not None:
        return _checkout_version(options.source_dir, f"--source-dir {options.source_dir}", compat)
    if options.git_ref is not None and not re.fullmatch(r"v\d+\.\d+\.\d+", options.git_ref):
        log = options.cache_dir / "logs" / "pin-clone.log"
        cloned = checkout.clone(options.git_url, options.git_ref, options.cache_dir, log)
        return _checkout_version(cloned.path, f"--git-ref {options.git_ref}", compat)
    return None


def _wheel_version(path: Path, cell: Cell) -> tuple[Version, str] | None:
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return None  # the source stage names the problem
    if name != "torch":
        return None
    origin = f"--wheel {path.name}"
    try:
        said = version_py.read(path)
    except WheelError:
        return version, origin  # the source stage names an unreadable wheel
    built = said.version
    if built is not None and _same(built, version) is False:
        raise UserError(
            f"{origin}: its file name says version {version}, its torch/version.py says {built!r}: the file was "
            "renamed, or is not the wheel it says. Give the wheel as the build wrote it."
        )
    cuda = said.cuda
    built_for = CPU if not cuda else ".".join(cuda.split(".")[:2])
    if said.says_cuda and built_for != cell.cuda:
        what = "a CPU build" if built_for == CPU else f"a CUDA {built_for} build"
        raise UserError(
            f"{origin} is {what} (its torch/version.py says cuda = {cuda!r}), but the cell is "
            f"{cell.id}: select its cell with --cuda {built_for}."
        )
    return version, origin


def _same(text: str, version: Version) -> bool | None:
    """Whether torch/version.py's ``text`` is the file name's ``version``. A name without a label and a version.py
    with an accelerator's are the same: PyPI's win_amd64 CPU wheels are named 2.13.0 and say 2.13.0+cpu."""
    try:
        said = Version(text)
    except InvalidVersion:
        return None
    if said == version:
        return True
    labelled = build_version.accelerator_label(said.local)
    return version.local is None and said.public == version.public and labelled


def _checkout_version(path: Path, origin: str, compat: Compat) -> tuple[Version, str] | None:
    """version.txt + ``+git<sha7>`` of HEAD (upstream's default), or version.txt alone outside git; None for a
    release's checkout (version.txt 2.5.1): it builds that release, as ``<release>+<label>``."""
    version_txt = path / "version.txt"
    if not version_txt.is_file():
        return None  # not a PyTorch checkout: the source stage says so
    text = version_txt.read_text(encoding="utf-8").strip()
    version = build_version.parse(text, f"{version_txt} says")
    if build_version.is_release(compat, version) and version.local is None:
        return None
    head = checkout.head_commit(path)
    if version.local is None and head is not None:
        version = Version(f"{version}+git{head[:7]}")
        return version, f"{origin} (version.txt {text}, HEAD {head[:7]})"
    return version, f"{origin} (version.txt {text})"


def _nightly(options: RunOptions, compat: Compat) -> tuple[Version, str]:
    """``--build-version nightly``: the checkout's version.txt X.Y.Z with ``.devYYYYMMDD`` of the run's day
    (SOURCE_DATE_EPOCH's where it is set, so a rerun of the same night gets the same version), as upstream's
    nightlies are named."""
    if not options.compiles:
        raise UserError(
            "--build-version nightly names the nightly of a compile (--source-dir or --git-ref): a wheel carries its "
            "own version; give --wheel alone, or a version (--build-version 2.16.0.dev20261128)."
        )
    if options.source_dir is not None:
        path, origin = options.source_dir, f"--source-dir {options.source_dir}"
    else:
        assert options.git_ref is not None
        log = options.cache_dir / "logs" / "pin-clone.log"
        path = checkout.clone(options.git_url, options.git_ref, options.cache_dir, log).path
        origin = f"--git-ref {options.git_ref}"
    version_txt = path / "version.txt"
    if not version_txt.is_file():
        raise UserError(f"{origin}: no version.txt, so no nightly version can be made: give the root of a PyTorch "
                        "checkout, or --build-version X.Y.Z.devYYYYMMDD.")  # fmt: skip
    base = build_version.parse(version_txt.read_text(encoding="utf-8").strip(), f"{version_txt} says").base_version
    day = build_version.nightly_day(source_date_epoch())
    return Version(f"{base}.dev{day}"), f"{origin} (--build-version nightly: version.txt {base}, night {day})"
