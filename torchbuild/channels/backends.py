"""The channel a name stands for: the one place that chooses a backend (local directory, S3, anaconda.org)."""

from __future__ import annotations

from pathlib import Path

from torchbuild.channels import Channel
from torchbuild.config.channel_spec import check_spec, local_path


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
