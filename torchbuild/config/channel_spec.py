"""Channel names: what --channel and matrix.yaml's channel may be, checked without the network or the file system,
and their parts (a local directory, an S3 bucket and prefix, an anaconda.org owner and label). The channels
themselves are in torchbuild/channels."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from torchbuild.errors import UserError, one_of

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# What a local channel's path may be, checked from the name alone: one name of at most NAME_MAX bytes (ext4, XFS,
# APFS; NTFS: 255 characters), and the whole path short enough that the deepest file a channel holds below it
# (whl/nightly/simple/<project>/<wheel>.sha256 in a staging folder: under DEEPEST bytes) stays within Linux's
# PATH_MAX. Longer, the OS refuses it mid-publish ("File name too long").
NAME_MAX = 255
PATH_MAX = 4096
DEEPEST = 256
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
    _fits(path, spec)
    # 'missing/../channel': mkdir would make 'missing' too, left behind empty; resolved, only the channel is made
    return path.resolve() if ".." in path.parts else path


def _fits(path: Path, spec: str) -> None:
    """UserError, in one line, where a local channel's path (``spec`` as given) is longer than a file system takes
    (NAME_MAX, PATH_MAX)."""
    shown = spec if len(spec) <= 80 else f"{spec[:60]}...{spec[-12:]}"
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest > NAME_MAX:
        raise UserError(f"The channel path {shown} has a name of {longest} bytes; a file system takes at most "
                        f"{NAME_MAX} in one name. Give a shorter path.")  # fmt: skip
    length = len(os.fsencode(str(path)))
    if length > PATH_MAX - DEEPEST:
        raise UserError(f"The channel path {shown} is {length:,} bytes long; with the files a channel holds below it, "
                        f"it would pass the {PATH_MAX:,} bytes a path may have. Give one of at most "
                        f"{PATH_MAX - DEEPEST:,} bytes.")  # fmt: skip



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
