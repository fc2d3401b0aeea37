"""A conda package (.conda or .tar.bz2) read back from disk for its checks (checks/metadata.py, checks/content.py).

conda-package-streaming streams the archive's tars once: info/ members are kept in memory (they are small),
payload members are hashed as they pass, and the few payload files a check reads (the import tables of each PE
file, a wheel's entry_points.txt, the Windows script launchers) are read as they pass. Nothing is extracted to disk.
``package_check`` registers a check of the archive with its code.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from torchbuild.config import nesting
from torchbuild.errors import UserError
from torchbuild.host import archives
from torchbuild.platforms.windows.pe import PeError, PeInfo, read_pe
from torchbuild.results import define

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

# --- data the checks rely on -----------------------------------------------------------------------------

NAME = re.compile(r"[a-z0-9_][a-z0-9_\-.]*")
VERSION = re.compile(r"[\w.]+", re.ASCII)  # conda-verify's pattern for versions and build strings
BAD_SEQUENCES = ("--", "-.", "-_", ".-", "..", "._", "_-", "_.")  # '__' is fine
# conda-build's allowed license families (conda_build/license_family.py)
LICENSE_FAMILIES = frozenset(
    ["AGPL", "LGPL", "GPL3", "GPL2", "GPL", "BSD", "MIT", "APACHE", "PSF", "CC", "MOZILLA", "PUBLIC-DOMAIN",
     "PROPRIETARY", "OTHER", "NONE"]
)  # fmt: skip
FORBIDDEN_TOP = frozenset({"conda-meta", "conda-bld", "pkgs", "pkgs32", "envs"})
LINK_SCRIPTS = tuple(f"-{when}.{ext}" for when in ("post-link", "pre-link", "pre-unlink") for ext in ("sh", "bat"))
PE_SUFFIXES = (".exe", ".dll", ".pyd")
# Payload files a check reads whole: a wheel's entry points and the launchers of its Windows scripts (TB110)
READ_WHOLE = re.compile(r"(^|/)[^/]+\.dist-info/entry_points\.txt$|^Scripts/[^/]+\.exe$")
BINARY_PLACEHOLDER_LENGTH = 255

# Windows MAX_PATH is 260 characters including the terminating NUL. A typical user's prefix: a 20-character
# user name, Miniconda in the home directory, a 16-character environment name. conda first extracts a package
# into pkgs/<dist>/, then links into the environment: both paths must fit.
WIN_MAX_PATH = 260
WIN_USER_HOME = "C:\\Users\\" + "u" * 20 + "\\miniconda3\\"
WIN_ENV_PREFIX = WIN_USER_HOME + "envs\\" + "e" * 16 + "\\"


class PackageUnreadable(UserError):
    """The file is not a readable conda package (bad zip/tar, missing component, no info/index.json)."""


# --- reading ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # file | symlink | hardlink | dir | other
    size: int = 0
    sha256: str = ""
    target: str = ""  # link target
    pe: PeInfo | None = None  # the import tables of a .exe/.dll/.pyd file that is a readable PE
    pe_problem: str = ""  # why a .exe/.dll/.pyd file is not a readable PE
    data: bytes = b""  # the content of a payload file READ_WHOLE names


@dataclass(frozen=True)
class ContainerEntry:
    name: str
    stored: bool  # zip entry stored without compression, as CEP 35 requires


@dataclass(frozen=True)
class CondaArchive:
    path: Path
    format: str  # "conda" | "tar.bz2"
    container: tuple[ContainerEntry, ...]  # the outer zip of a .conda; () for .tar.bz2
    metadata_json: bytes | None  # .conda's metadata.json
    info: Mapping[str, bytes]  # info/ files by member name
    info_members: tuple[Member, ...]
    pkg_members: tuple[Member, ...]
    index: Mapping[str, Any] = field(default_factory=dict)

    @property
    def stem(self) -> str:
        return self.path.name.removesuffix(".conda").removesuffix(".tar.bz2")

    @property
    def filename_parts(self) -> tuple[str, str, str] | None:
        parts = self.stem.rsplit("-", 2)
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None

    @property
    def subdir(self) -> str:
        return str(self.index.get("subdir", ""))

    @property
    def is_windows(self) -> bool:
        return self.subdir.startswith("win-") or self.index.get("platform") == "win"

    def files(self) -> list[Member]:
        """Payload members that are installed (files and links), not directories."""
        return [m for m in self.pkg_members if m.kind != "dir"]


def _payload_member(ti: tarfile.TarInfo, handle: IO[bytes]) -> Member:
    digest = hashlib.sha256()
    keep = ti.name.lower().endswith(PE_SUFFIXES) or READ_WHOLE.search(ti.name) is not None
    blocks: list[bytes] = []
    while block := handle.read(1 << 20):
        if keep:
            blocks.append(block)
        digest.update(block)
    data = b"".join(blocks)
    pe, problem = None, ""
    if ti.name.lower().endswith(PE_SUFFIXES):
        try:
            pe = read_pe(data, ti.name)
        except PeError as exc:
            problem = str(exc)  # C1145 names a file with a PE suffix that is no PE
    whole = data if READ_WHOLE.search(ti.name) else b""
    return Member(ti.name, "file", size=ti.size, sha256=digest.hexdigest(), pe=pe, pe_problem=problem, data=whole)


def _read_tar(
    members: Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]],
    into_info: bool | None,
    info: dict[str, bytes],
    infos: list[Member],
    pkgs: list[Member],
    payload: bool = True,
) -> None:
    """Read one stream of tar members; ``into_info`` None sorts them by their info/ prefix (a .tar.bz2 holds
    both). Without ``payload``, payload members are passed over (not listed, not hashed)."""
    for tar, ti in members:
        is_info = ti.name.startswith("info/") if into_info is None else into_info
        if not is_info and not payload:
            continue
        if ti.isdir():
            member = Member(ti.name, "dir")
        elif ti.issym():
            member = Member(ti.name, "symlink", target=ti.linkname)
        elif ti.islnk():
            member = Member(ti.name, "hardlink", target=ti.linkname)
        elif ti.isfile():
            handle = tar.extractfile(ti)
            assert handle is not None
            if is_info:
                data = handle.read()
                info[ti.name] = data
                member = Member(ti.name, "file", size=ti.size, sha256=hashlib.sha256(data).hexdigest())
            else:
                member = _payload_member(ti, handle)
        else:
            member = Member(ti.name, "other")
        (infos if is_info else pkgs).append(member)


def _counted(
    path: Path, members: Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]
) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """The members of one of the package's tarballs, each counted against host/archives.py's limits before its
    data is read (a .conda's two tarballs are counted each against the whole file's size)."""
    return archives.counted_tar(members, str(path), path.stat().st_size)


def check_unpacked_size(path: Path) -> None:
    """PackageUnreadable when ``path`` (.conda or .tar.bz2) would unpack past host/archives.py's limits: its tar
    headers are read, its files' data passed over, nothing written."""
    from conda_package_streaming.package_streaming import stream_conda_component  # only where a package is read

    components = ("info", "pkg") if path.name.endswith(".conda") else (None,)
    try:
        for component in components:
            stream = stream_conda_component(path, component=component) if component else stream_conda_component(path)
            for _tar, _member in _counted(path, stream):
                pass
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zstd.ZstdError, LookupError) as exc:
        raise PackageUnreadable(f"{path}: cannot be read: {exc}") from None
    except archives.TooLarge as exc:
        raise PackageUnreadable(str(exc)) from None


def read_package(path: Path, payload: bool = True) -> CondaArchive:
    """Read ``path`` (.conda or .tar.bz2). Raises PackageUnreadable naming the file and what is wrong.

    ``payload=False`` reads what an indexer reads, the container and info/, and leaves out the payload (a .conda's
    pkg-*.tar.zst is only required to be there): a quick check that the channel's index can be built."""
    from conda_package_streaming.package_streaming import stream_conda_component  # only where a package is read

    info: dict[str, bytes] = {}
    infos: list[Member] = []
    pkgs: list[Member] = []
    container: tuple[ContainerEntry, ...] = ()
    metadata: bytes | None = None
    name = path.name
    try:
        if name.endswith(".conda"):
            fmt = "conda"
            stem = name.removesuffix(".conda")
            with archives.open_zip(path) as zf:
                entries = zf.infolist()
                container = tuple(ContainerEntry(e.filename, e.compress_type == zipfile.ZIP_STORED) for e in entries)
                names = {e.filename for e in entries}
                if "metadata.json" in names:
                    metadata = zf.read("metadata.json")
                for component, into_info in (("info", True), ("pkg", False)):
                    inner = f"{component}-{stem}.tar.zst"
                    if inner not in names:
                        raise PackageUnreadable(f"{path}: the .conda has no {inner}")
                    if into_info or payload:
                        members = _counted(path, stream_conda_component(path, component=component))
                        _read_tar(members, into_info, info, infos, pkgs)
        elif name.endswith(".tar.bz2"):
            fmt = "tar.bz2"
            _read_tar(_counted(path, stream_conda_component(path)), None, info, infos, pkgs, payload)
        else:
            raise PackageUnreadable(f"{path}: not a conda package (the name must end in .conda or .tar.bz2)")
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zstd.ZstdError, LookupError) as exc:
        raise PackageUnreadable(f"{path}: cannot be read: {exc}") from None
    except archives.TooLarge as exc:
        raise PackageUnreadable(str(exc)) from None
    if "info/index.json" not in info:
        raise PackageUnreadable(f"{path}: has no info/index.json")
    try:
        index = nesting.loads(info["info/index.json"])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PackageUnreadable(f"{path}: info/index.json is not JSON: {exc}") from None
    if not isinstance(index, dict):
        raise PackageUnreadable(f"{path}: info/index.json is not a JSON object")
    return CondaArchive(
        path=path,
        format=fmt,
        container=container,
        metadata_json=metadata,
        info=info,
        info_members=tuple(infos),
        pkg_members=tuple(pkgs),
        index=index,
    )


# --- helpers ---------------------------------------------------------------------------------------------


def is_ascii(data: bytes, allow_cr: bool = False) -> bool:
    """conda-verify's rule: printable ASCII and newlines only (CR too in Windows packages)."""
    allowed = {10, 13} if allow_cr else {10}
    return all(32 <= b < 127 or b in allowed for b in data)


def bad_sequence(text: str) -> str | None:
    return next((seq for seq in BAD_SEQUENCES if seq in text), None)


def paths_json(pkg: CondaArchive) -> tuple[list[dict[str, Any]], str]:
    """info/paths.json entries, and a problem if it cannot be used."""
    raw = pkg.info.get("info/paths.json")
    if raw is None:
        return [], "info/paths.json is missing"
    try:
        data = nesting.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [], f"info/paths.json is not JSON: {exc}"
    paths = data.get("paths") if isinstance(data, dict) else None
    if not isinstance(paths, list) or not all(isinstance(p, dict) and "_path" in p for p in paths):
        return [], "info/paths.json has no list of paths with '_path'"
    return paths, ""


@dataclass(frozen=True)
class PrefixEntry:
    placeholder: str
    mode: str
    path: str
    source: str  # info/has_prefix or info/paths.json


def prefix_entries(pkg: CondaArchive) -> list[PrefixEntry]:
    entries: list[PrefixEntry] = []
    raw = pkg.info.get("info/has_prefix")
    if raw is not None:
        for line in raw.decode("utf-8", "replace").splitlines():
            parts = line.strip().split()
            if len(parts) == 3:
                entries.append(PrefixEntry(parts[0], parts[1], parts[2], "info/has_prefix"))
            elif parts:
                entries.append(PrefixEntry("/opt/anaconda1anaconda2anaconda3", "text", " ".join(parts), "has_prefix"))
    paths, _ = paths_json(pkg)
    for entry in paths:
        if "prefix_placeholder" in entry:
            mode = str(entry.get("file_mode", "text"))
            entries.append(PrefixEntry(str(entry["prefix_placeholder"]), mode, str(entry["_path"]), "paths.json"))
    return entries


# --- registering the checks ------------------------------------------------------------------------------
# Each check takes the archive and returns the problems found (empty: passed), or a str reason why it does not
# apply (skipped).

Outcome = list[str] | str
CheckFunction = Callable[[CondaArchive], Outcome]


@dataclass(frozen=True)
class PackageCheck:
    code: str
    run: CheckFunction
    note: Callable[[CondaArchive], str] | None = None  # the message of a passed check


PACKAGE_CHECKS: list[PackageCheck] = []
TB100 = define("TB100", "the package can be read")


def package_check(
    code: str, title: str, note: Callable[[CondaArchive], str] | None = None
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the package check ``code``."""

    def register(function: CheckFunction) -> CheckFunction:
        PACKAGE_CHECKS.append(PackageCheck(define(code, title), function, note))
        return function

    return register
