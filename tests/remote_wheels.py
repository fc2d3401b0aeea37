"""Reading the member list of a wheel on the package index without downloading it: PyPI's JSON API gives the wheel's
URL, and HTTP range requests read only the zip's central directory (the CUDA wheels are hundreds of megabytes; their
member lists are kilobytes)."""

from __future__ import annotations

import io
import json
import os
import urllib.parse
import urllib.request
import zipfile

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

INDEX = os.environ.get("TORCHBUILD_TEST_PYPI", "https://pypi.org")
TIMEOUT_S = 60


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests."""

    def __init__(self, url: str) -> None:
        self.url = url
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            self.size = int(response.headers["Content-Length"])
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.position >= self.size or not len(buffer):
            return 0
        end = min(self.size, self.position + len(buffer)) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.position}-{end}"})
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            data = response.read()
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def newest_wheel(requirement: str, platform: str = "win_amd64") -> tuple[str, str]:
    """(file name, URL) of the newest wheel for ``platform`` that satisfies ``requirement`` on the index."""
    req = Requirement(requirement)
    api = f"{INDEX}/pypi/{canonicalize_name(req.name)}/json"
    with urllib.request.urlopen(api, timeout=TIMEOUT_S) as response:
        releases = json.load(response)["releases"]
    candidates = []
    for entry in (e for files in releases.values() for e in files):
        name = entry["filename"]
        if not name.endswith(".whl") or entry.get("yanked"):
            continue
        _dist, version, _build, tags = parse_wheel_filename(name)
        if any(t.platform == platform for t in tags) and req.specifier.contains(version, prereleases=False):
            candidates.append((version, name, urllib.parse.urljoin(api, entry["url"])))
    if not candidates:
        raise LookupError(f"the index has no {platform} wheel for {requirement}")
    _version, name, url = max(candidates)
    return name, url


def members(url: str) -> list[str]:
    with zipfile.ZipFile(io.BufferedReader(RangeFile(url), buffer_size=1 << 16)) as archive:
        return archive.namelist()
