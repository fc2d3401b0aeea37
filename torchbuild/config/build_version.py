"""The version of what a cell builds when it is the users' own: a release candidate, a nightly, a source build, a fork.

Upstream's source build is ``X.Y.Za0+git<sha7>`` (version.txt plus the commit, as ``tools/generate_torch_version.py``
computes it without ``PYTORCH_BUILD_VERSION``), a nightly ``X.Y.Z.devYYYYMMDD`` (``+cpu``/``+cuXYZ`` or none), a
release candidate ``X.Y.ZrcN``; a fork may add any PEP 440 local label. Such a version is kept as it is: the tables,
which key their facts by release, lend the facts of the release it belongs to (``facts_of``), and the plan says which
and why.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from torchbuild.config.matrix import Cell
from torchbuild.errors import UserError
from torchbuild.knowledge.compat import Compat, TorchRelease

NIGHTLY = "nightly"  # --build-version nightly: X.Y.Z.devYYYYMMDD of the checkout and the run's day


@dataclass(frozen=True)
class Facts:
    """The release whose table facts a version takes, and one line saying why."""

    release: TorchRelease
    why: str


def nightly_day(epoch: int | None) -> str:
    """YYYYMMDD (UTC) of ``epoch`` (SOURCE_DATE_EPOCH), or of now where it is not set."""
    moment = datetime.datetime.now(datetime.timezone.utc) if epoch is None else \
        datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)  # fmt: skip
    return moment.strftime("%Y%m%d")


def parse(text: str, flag: str) -> Version:
    """``text`` as a PEP 440 version; a UserError naming ``flag`` otherwise."""
    try:
        return Version(text)
    except InvalidVersion:
        raise UserError(
            f"{flag} {text!r} is not a PEP 440 version: give one such as 2.6.0, 2.6.0rc3, 2.6.0a0+git1eba9b3 or "
            "2.10.0.dev20251105+cpu."
        ) from None


_ACCELERATOR_LABEL = re.compile(r"cpu|cu\d+")


def accelerator_label(local: str | None) -> bool:
    """Whether a local label is the accelerator's (cpu, cu128), as upstream labels its builds, not a build's own."""
    return local is not None and _ACCELERATOR_LABEL.fullmatch(local) is not None


def kind_of(version: Version) -> str:
    """What a version is, in the words a release engineer uses."""
    if version.dev is not None:
        return "a nightly" if version.local is None or accelerator_label(version.local) else "a dev build"
    if version.pre is not None:
        if version.pre == ("a", 0):
            return "a source build"
        return "a release candidate" if version.pre[0] == "rc" else "a pre-release"
    return "a local build" if version.local and not accelerator_label(version.local) else "a release"


def is_release(compat: Compat, version: Version) -> bool:
    """Whether ``version`` (its local label aside) is one of upstream's releases the tables know."""
    return compat.release(version.public) is not None and not version.is_prerelease


def facts_of(compat: Compat, version: Version) -> Facts:
    """The release whose facts ``version`` takes: the release itself; for a pre-release, nightly or source build of
    X.Y.Z, X.Y.Z where the tables know it, else the newest known release of its X.Y series; past every known release,
    the newest (said so); between releases, the newest older one."""
    known = compat.releases  # ascending
    base = Version(version.base_version)
    exact = compat.release(version.base_version)
    what = f"{version} is {kind_of(version)}"
    if exact is not None:
        if kind_of(version) == "a release" and not version.post:
            return Facts(exact, f"{version} is a release")
        return Facts(exact, f"{what} of {exact.version}: using {exact.version}'s facts")
    series = [r for r in known if Version(r.version).release[:2] == base.release[:2]]
    if series:
        older = [r for r in series if Version(r.version) <= base]
        chosen = (older or series)[-1]
        return Facts(chosen, f"{what} of the {base.major}.{base.minor} series: using {chosen.version}'s facts")
    newest = known[-1]
    if base > Version(newest.version):
        return Facts(newest, f"{what}, newer than the data: using {newest.version}'s facts (the newest known)")
    older = [r for r in known if Version(r.version) < base]
    chosen = older[-1] if older else known[0]
    return Facts(chosen, f"{what}; its series is not in the data: using {chosen.version}'s facts (the nearest older)")


def labelled(version: Version, label: str) -> str:
    """The version the artifacts carry: as built where it has a local label (a fork's, a source build's
    ``+git<sha>``, a nightly's ``+cpu``), else with the cell's ``label`` (cpu, cu128) as upstream's wheels have it."""
    return str(version) if version.local else f"{version}+{label}"


@dataclass(frozen=True)
class OwnBuild:
    """A build of the users' own, as the Plan records it: its version as built (``labelled`` adds the cell's label
    where it has none), where that version was read, and whose facts it takes, with why."""

    version: str
    origin: str  # --wheel FILE, --source-dir PATH (version.txt and HEAD), --git-ref REF, --build-version
    facts: str  # facts_of's line


def own_facts(compat: Compat, cell: Cell, own: OwnBuild, pinned: str | None) -> tuple[TorchRelease, list[str]]:
    """The release whose facts ``own`` takes (the pin step chose ``pinned``), and the plan's notes saying so."""
    release = compat.release(pinned or "")
    if release is None:
        raise UserError(f"{cell.id}: no release named {pinned!r} lends its facts to {own.origin}")
    notes = [f"{own.origin}: {own.facts}"]
    if not release.supports(cell.platform, cell.cuda, cell.python):
        notes.append(f"upstream's torch {release.version} shipped no {cell.id} build: its facts are taken as they are")
    return release, notes


def build_string_label(version: str, accelerator: str) -> str:
    """A build string's part for a local label other than the accelerator's (a source build's git1eba9b3, a fork's):
    ``git1eba9b3_``, so that two builds of one version are two conda files; empty otherwise."""
    local = Version(version).local
    if local is None or local == accelerator:
        return ""
    return re.sub(r"[^A-Za-z0-9_.]", "_", local) + "_"
