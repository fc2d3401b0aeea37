"""Channels artifacts are published to: one Protocol, one module per backend.

Every backend follows the same order: check every destination first (an identical file is a no-op, a different
file under an existing name is refused before anything is written), then packages, then the index, so that the
index never names a file that is not there and nothing is ever deleted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from packaging.utils import canonicalize_name, parse_wheel_filename

from torchbuild.errors import UserError, one_of
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
        return wheel_path(name) if self.kind == "wheel" else f"{self.subdir}/{name}"


def wheel_path(wheel_name: str) -> str:
    """A wheel's place in a channel: below its project's PEP 503 page, whl/simple/<project>/<file>."""
    return f"whl/simple/{project_of(wheel_name)}/{wheel_name}"


def project_of(wheel_name: str) -> str:
    """The canonical project name of a wheel file, what ``pip install`` is given."""
    return str(canonicalize_name(parse_wheel_filename(wheel_name)[0]))


class Channel(Protocol):
    url: str

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        """Where each artifact goes and whether it is new; raises UserError on a conflicting existing file
        (unless ``replace``)."""
        ...

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        """Put the new files in place, then rewrite the indexes; returns the published files."""
        ...

    def index(self) -> str:
        """Rebuild the indexes from the files that are there; returns a one-line summary."""
        ...


SCHEMES = ("a local directory", "s3://bucket/prefix", "anaconda://owner", "anaconda://owner/label")
_SCHEME_LIKE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # 's3:/x', 'http:x'; one letter is a Windows drive


def check_spec(spec: str) -> str:
    """The scheme of a channel name ('local', 's3' or 'anaconda'), checked without the network or the file system:
    what --channel and matrix.yaml's channel may be. UserError names the valid forms."""
    valid = f"Valid channels: {one_of(SCHEMES)}."
    if not spec.strip():
        raise UserError(f"The channel name is empty. {valid}")
    if spec != spec.strip() or any(ord(c) < 32 for c in spec):
        raise UserError(f"The channel name {spec!r} has leading or trailing spaces or control characters. {valid}")
    if "://" not in spec:
        if _SCHEME_LIKE.match(spec):
            raise UserError(f"The channel '{spec}' looks like a URL with a missing '//'. {valid}")
        return "local"
    scheme = spec.split("://", 1)[0]
    if scheme == "file":
        if not spec.removeprefix("file://"):
            raise UserError(f"The channel '{spec}' names no directory: use file:///path/to/channel or a path.")
        return "local"
    if scheme == "s3":
        from torchbuild.channels.s3_client import parse_url

        parse_url(spec)
        return "s3"
    if scheme == "anaconda":
        from torchbuild.channels.anaconda import parse_url as parse_anaconda

        parse_anaconda(spec)
        return "anaconda"
    raise UserError(f"Unknown channel scheme '{scheme}://' in '{spec}'. {valid}")


def local_path(spec: str, root: Path) -> Path | None:
    """The directory of a local channel (relative names are below ``root``); None for a remote one."""
    if check_spec(spec) != "local":
        return None
    path = Path(spec.removeprefix("file://"))
    return path if path.is_absolute() else root / path


def open_channel(spec: str, root: Path) -> Channel:
    directory = local_path(spec, root)
    if directory is not None:
        from torchbuild.channels.local import LocalChannel

        return LocalChannel(directory)
    kind = check_spec(spec)
    if kind == "s3":
        from torchbuild.channels.s3 import S3Channel

        return S3Channel(spec)
    if kind == "anaconda":
        from torchbuild.channels.anaconda import AnacondaChannel

        return AnacondaChannel(spec)
    raise AssertionError(f"check_spec gave an unknown kind {kind!r}")
