"""Channels artifacts are published to: one Protocol, one module per backend.

Every backend follows the same order: check every destination first (an identical file is a no-op, a different
file under an existing name is refused before anything is written), then packages, then the index, so that the
index never names a file that is not there and nothing is ever deleted. A publisher holds ``locked()`` from its plan
to its last write, so that no other publisher writes between its check and its write (a local channel's lock file;
S3's conditional writes do the same without a lock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from torchbuild.channels import nightly
from torchbuild.errors import UserError
from torchbuild.results import Artifact

Action = Literal["new", "unchanged", "replaced"]


@dataclass(frozen=True)
class Upload:
    artifact: Artifact
    kind: Literal["conda", "wheel"]
    subdir: str  # conda subdir, or "whl" for wheels
    destination: str  # path or URL inside the channel
    action: Action

    @property
    def channel_path(self) -> str:
        """Where installers find the file, relative to the channel URL."""
        name = self.artifact.path.name
        return wheel_path(name) if self.kind == "wheel" else conda_path(self.subdir, name)


def wheel_path(wheel_name: str) -> str:
    """A wheel's place in a channel: below its project's PEP 503 page, whl/simple/<project>/<file> (a nightly's:
    whl/nightly/simple/...; channels/nightly.py)."""
    return f"{nightly.simple_root(wheel_name)}/{project_of(wheel_name)}/{wheel_name}"


def conda_path(subdir: str, package_name: str) -> str:
    """A conda package's place in a channel: its subdir's folder, in the channel or (a nightly) in label/nightly."""
    root = nightly.conda_root(package_name)
    return f"{root}/{subdir}/{package_name}" if root else f"{subdir}/{package_name}"


def project_of(wheel_name: str) -> str:
    """The canonical project name of a wheel file, what ``pip install`` is given."""
    return str(canonicalize_name(parse_wheel_filename(wheel_name)[0]))


def install_lines(
    channel: Channel, conda_names: Iterable[str], wheel_sets: Iterable[Iterable[str]], night: bool = False
) -> list[str]:
    """How users install these packages from ``channel``: a conda line and (where it serves wheels) a pip line for
    each set of wheels that install together (a cell's torch and its companions). The wheel projects come pinned to
    the published version (``requirement_of``: ``torch==2.13.0+cpu``): pip takes the highest version of every index
    it reads, and the index a user adds for torch's own requirements (PyPI) may have a newer torch or torchvision
    than the channel's. A pre-release (an own build, a nightly) is one pip takes only with ``--pre``, so the line
    has it. ``night``: nightlies, from the nightly label and index."""
    conda = sorted(set(conda_names))
    conda_url = channel.nightly_url if night else channel.url
    simple = nightly.NIGHTLY_SIMPLE if night else nightly.RELEASE_SIMPLE
    lines = [f"conda install -c {conda_url} {' '.join(conda)}"] if conda else []
    if not channel.serves_wheels:
        return lines
    for wheels in dict.fromkeys(group for given in wheel_sets for group in _together(given)):
        pre = any(Version(w.partition("==")[2]).is_prerelease for w in wheels if "==" in w)
        lines.append(f"pip install{' --pre' if pre else ''} --index-url {channel.url}/{simple} {' '.join(wheels)}")
    return lines


def _together(requirements: Iterable[str]) -> list[tuple[str, ...]]:
    """``requirements`` in as few pip lines as hold each project once (two builds of torch are two lines)."""
    groups: list[dict[str, str]] = []
    for requirement in sorted(set(requirements)):
        project = requirement.partition("==")[0]
        group = next((g for g in groups if project not in g), None)
        if group is None:
            groups.append(group := {})
        group[project] = requirement
    return [tuple(sorted(group.values())) for group in groups]


def requirement_of(wheel_name: str) -> str:
    """What ``pip install`` is given for a published wheel: its project pinned to the file's exact version
    (``torch==2.13.0+cpu``), so that no other index's newer release of the project replaces it."""
    _name, version, _build, _tags = parse_wheel_filename(wheel_name)
    return f"{project_of(wheel_name)}=={version}"


def conda_name_of(file_name: str) -> str:
    """The package name of a conda package file, ``<name>-<version>-<build>.conda``."""
    return file_name.rsplit("-", 2)[0]


class Channel(Protocol):
    url: str  # what installers are given for its releases
    nightly_url: str  # the conda channel its nightlies are installed from (label/nightly)
    serves_wheels: bool  # whether pip can install from it (anaconda.org takes conda packages only)

    def locked(self) -> AbstractContextManager[None]:
        """Keep every other publisher of this channel out while plan and apply run."""
        ...

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        """Where each artifact goes and whether it is new; raises UserError on a conflicting existing file
        (unless ``replace``)."""
        ...

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        """Put the new files in place, then rewrite the indexes; returns the published files."""
        ...

    def index(self, keep_nightlies: int | None = None) -> str:
        """Rebuild the indexes from the files that are there; with ``keep_nightlies``, without the nightlies older
        than the newest that many nights of their package and platform (deleted in the same commit; channels/
        nightly.py). Returns a summary: its first line, then one line per removed file."""
        ...


# --- the publish rule every backend follows ------------------------------------------------------------------


def action_for(present: bool, same: Callable[[], bool], replace: bool) -> Action | None:
    """What publishing does to a destination: ``new`` where nothing is there, ``unchanged`` where the same file is
    (``same`` is asked only then), ``replaced`` where another file is and ``--replace`` was given; None: a conflict."""
    if not present:
        return "new"
    if same():
        return "unchanged"
    return "replaced" if replace else None


def refuse(conflicts: Sequence[str]) -> UserError:
    """The error for destinations that hold another file (``action_for`` said None): nothing has been written."""
    return UserError(
        "publish: refusing to overwrite a different file under an existing name (bump build_number in matrix.yaml "
        "to publish a new build, or pass --replace): " + "; ".join(conflicts)
    )
