"""Channel names: what --channel and matrix.yaml's channel may be, checked without the network or the file system,
and their parts (a local directory, an S3 bucket and prefix, an anaconda.org owner and label). The channels
themselves are in torchbuild/channels."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from torchbuild.errors import UserError, one_of

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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
        parse_s3(spec)
        return "s3"
    if scheme == "anaconda":
        parse_anaconda(spec)
        return "anaconda"
    raise UserError(f"Unknown channel scheme '{scheme}://' in '{spec}'. {valid}")


def local_path(spec: str, root: Path) -> Path | None:
    """The directory of a local channel (relative names are below ``root``); None for a remote one."""
    if check_spec(spec) != "local":
        return None
    path = Path(spec.removeprefix("file://"))
    path = path if path.is_absolute() else root / path
    # 'missing/../channel': mkdir would make 'missing' too, left behind empty; resolved, only the channel is made
    return path.resolve() if ".." in path.parts else path



@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str  # "" or "some/prefix" (no slashes at the ends)

    def key(self, *parts: str) -> str:
        return str(PurePosixPath(self.prefix, *parts)) if self.prefix else str(PurePosixPath(*parts))


def parse_s3(url: str) -> Location:
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise UserError(f"'{url}' is not an S3 channel: use s3://bucket/prefix")
    if not _BUCKET.match(parts.netloc):
        raise UserError(
            f"'{parts.netloc}' in '{url}' is not a valid S3 bucket name (3-63 lowercase letters, digits, dots, dashes)"
        )
    return Location(bucket=parts.netloc, prefix=parts.path.strip("/"))



def parse_anaconda(url: str) -> tuple[str, str]:
    """(owner, label) of anaconda://owner[/label]; the label is 'main' when not given."""
    rest = url.removeprefix("anaconda://").strip("/")
    parts = rest.split("/")
    if not rest or len(parts) > 2 or not all(_NAME.match(p) for p in parts):
        raise UserError(f"'{url}' is not an anaconda.org channel: use anaconda://owner or anaconda://owner/label")
    return parts[0], parts[1] if len(parts) == 2 else "main"
