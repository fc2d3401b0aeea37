"""Channels artifacts are published to: one Protocol, one module per backend.

Every backend follows the same order: check every destination first (an identical file is a no-op, a different
file under an existing name is refused before anything is written), then packages, then the index, so that the
index never names a file that is not there and nothing is ever deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

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


def open_channel(spec: str, root: Path) -> Channel:
    from torchbuild.channels.local import LocalChannel

    if "://" not in spec or spec.startswith("file://"):
        path = Path(spec.removeprefix("file://"))
        return LocalChannel(path if path.is_absolute() else root / path)
    scheme = spec.split("://", 1)[0]
    if scheme == "s3":
        from torchbuild.channels.s3 import S3Channel

        return S3Channel(spec)
    if scheme == "anaconda":
        from torchbuild.channels.anaconda import AnacondaChannel

        return AnacondaChannel(spec)
    raise UserError(f"Unknown channel scheme '{scheme}://' in '{spec}'. Valid channels: {', '.join(SCHEMES)}.")
