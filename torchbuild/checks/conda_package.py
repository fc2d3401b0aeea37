"""Checks of a conda package (.conda or .tar.bz2) read back from disk: conda-verify's C11xx and torchbuild's TB1xx.

The archive is streamed once: info/ members are kept in memory (they are small), payload members are hashed as
they pass. Nothing is extracted to disk.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import re
import sys
import tarfile
import zipfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from torchbuild.checks import result, skipped
from torchbuild.errors import UserError
from torchbuild.stages import Check

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
    [
        "AGPL",
        "LGPL",
        "GPL3",
        "GPL2",
        "GPL",
        "BSD",
        "MIT",
        "APACHE",
        "PSF",
        "CC",
        "MOZILLA",
        "PUBLIC-DOMAIN",
        "PROPRIETARY",
        "OTHER",
        "NONE",
    ]
)
FORBIDDEN_TOP = frozenset({"conda-meta", "conda-bld", "pkgs", "pkgs32", "envs"})
LINK_SCRIPTS = tuple(f"-{when}.{ext}" for when in ("post-link", "pre-link", "pre-unlink") for ext in ("sh", "bat"))
PE_SUFFIXES = (".exe", ".dll", ".pyd")
PE_MACHINE_AMD64 = 0x8664
PE_MACHINES = {0x14C: "I386", 0x8664: "AMD64", 0xAA64: "ARM64", 0x1C4: "ARMNT", 0x200: "IA64"}
HEAD_BYTES = 4096  # conda-verify reads this much of a PE file to find its header
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
    head: bytes = b""  # first bytes of .exe/.dll/.pyd files


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


def _read_tar(
    stream: IO[bytes] | zstd.ZstdFile | bz2.BZ2File,
    into_info: bool | None,
    info: dict[str, bytes],
    infos: list[Member],
    pkgs: list[Member],
) -> None:
    """Stream one tar; ``into_info`` None sorts members by their info/ prefix (a .tar.bz2 holds both)."""
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for ti in tar:
            is_info = ti.name.startswith("info/") if into_info is None else into_info
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
                    digest = hashlib.sha256()
                    head = b""
                    while block := handle.read(1 << 20):
                        if not head and ti.name.lower().endswith(PE_SUFFIXES):
                            head = block[:HEAD_BYTES]
                        digest.update(block)
                    member = Member(ti.name, "file", size=ti.size, sha256=digest.hexdigest(), head=head)
            else:
                member = Member(ti.name, "other")
            (infos if is_info else pkgs).append(member)


def read_package(path: Path) -> CondaArchive:
    """Read ``path`` (.conda or .tar.bz2). Raises PackageUnreadable naming the file and what is wrong."""
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
            with zipfile.ZipFile(path) as zf:
                entries = zf.infolist()
                container = tuple(ContainerEntry(e.filename, e.compress_type == zipfile.ZIP_STORED) for e in entries)
                names = {e.filename for e in entries}
                if "metadata.json" in names:
                    metadata = zf.read("metadata.json")
                for component, into_info in (("info", True), ("pkg", False)):
                    inner = f"{component}-{stem}.tar.zst"
                    if inner not in names:
                        raise PackageUnreadable(f"{path}: the .conda has no {inner}")
                    with zf.open(inner) as raw, zstd.open(raw, "rb") as stream:
                        _read_tar(stream, into_info, info, infos, pkgs)
        elif name.endswith(".tar.bz2"):
            fmt = "tar.bz2"
            with bz2.open(path, "rb") as stream:
                _read_tar(stream, None, info, infos, pkgs)
        else:
            raise PackageUnreadable(f"{path}: not a conda package (the name must end in .conda or .tar.bz2)")
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, zstd.ZstdError) as exc:
        raise PackageUnreadable(f"{path}: cannot be read: {exc}") from None
    if "info/index.json" not in info:
        raise PackageUnreadable(f"{path}: has no info/index.json")
    try:
        index = json.loads(info["info/index.json"])
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


def pe_machine(head: bytes) -> str:
    """The PE machine of a file from its first bytes: 'AMD64', 'I386', ... or why it is not a PE."""
    if head[:2] != b"MZ":
        return "not a PE file (no MZ header)"
    offset = int.from_bytes(head[0x3C:0x40], "little")
    if len(head) < offset + 6:
        return f"PE header at {offset} is past the first {len(head)} bytes"
    if head[offset : offset + 4] != b"PE\0\0":
        return "no PE signature"
    machine = int.from_bytes(head[offset + 4 : offset + 6], "little")
    return PE_MACHINES.get(machine, f"machine 0x{machine:04x}")


def _paths_json(pkg: CondaArchive) -> tuple[list[dict[str, Any]], str]:
    """info/paths.json entries, and a problem if it cannot be used."""
    raw = pkg.info.get("info/paths.json")
    if raw is None:
        return [], "info/paths.json is missing"
    try:
        data = json.loads(raw)
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


def _prefix_entries(pkg: CondaArchive) -> list[PrefixEntry]:
    entries: list[PrefixEntry] = []
    raw = pkg.info.get("info/has_prefix")
    if raw is not None:
        for line in raw.decode("utf-8", "replace").splitlines():
            parts = line.strip().split()
            if len(parts) == 3:
                entries.append(PrefixEntry(parts[0], parts[1], parts[2], "info/has_prefix"))
            elif parts:
                entries.append(PrefixEntry("/opt/anaconda1anaconda2anaconda3", "text", " ".join(parts), "has_prefix"))
    paths, _ = _paths_json(pkg)
    for entry in paths:
        if "prefix_placeholder" in entry:
            mode = str(entry.get("file_mode", "text"))
            entries.append(PrefixEntry(str(entry["prefix_placeholder"]), mode, str(entry["_path"]), "paths.json"))
    return entries


# --- the checks ------------------------------------------------------------------------------------------
# Each takes the archive and returns the problems found (empty: passed), or a str reason why it does not apply.

Outcome = list[str] | str


def c1101(pkg: CondaArchive) -> Outcome:
    return [] if pkg.index.get("name") else ["info/index.json has no name"]


def c1102(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    if parts is None:
        return [f"file name {pkg.path.name} is not <name>-<version>-<build>"]
    name = pkg.index.get("name")
    return [] if name == parts[0] else [f"index.json name '{name}' but the file name says '{parts[0]}'"]


def c1103(pkg: CondaArchive) -> Outcome:
    name = str(pkg.index.get("name", ""))
    if NAME.fullmatch(name) and not name.endswith((".", "-", "_")):
        return []
    return [f"'{name}' must match [a-z0-9_][a-z0-9_-.]* and not end in '.', '-' or '_'"]


def c1104(pkg: CondaArchive) -> Outcome:
    return [] if str(pkg.index.get("version", "")) else ["info/index.json has no version"]


def c1105(pkg: CondaArchive) -> Outcome:
    version = str(pkg.index.get("version", ""))
    seq = bad_sequence(version)
    if not VERSION.fullmatch(version):
        return [f"version '{version}' has characters other than letters, digits, '_' and '.'"]
    return [f"version '{version}' contains '{seq}'"] if seq else []


def c1106(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    version = str(pkg.index.get("version", ""))
    if parts is None or version == parts[1]:
        return []
    return [f"index.json version '{version}' but the file name says '{parts[1]}'"]


def c1107(pkg: CondaArchive) -> Outcome:
    version = str(pkg.index.get("version", ""))
    bad = version.startswith(("_", ".")) or version.endswith(("_", "."))
    return [f"version '{version}' starts or ends with '_' or '.'"] if bad else []


def c1108(pkg: CondaArchive) -> Outcome:
    number = pkg.index.get("build_number")
    ok = isinstance(number, int) and not isinstance(number, bool)
    return [] if ok else [f"build_number is {number!r}, not an integer"]


def c1109(pkg: CondaArchive) -> Outcome:
    number = pkg.index.get("build_number")
    return [f"build_number is {number}"] if isinstance(number, int) and number < 0 else []


def c1110(pkg: CondaArchive) -> Outcome:
    build = str(pkg.index.get("build", ""))
    return [] if VERSION.fullmatch(build) else [f"build string '{build}' is not made of letters, digits, '_', '.'"]


def c1111(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    build = str(pkg.index.get("build", ""))
    if parts is None or build == parts[2]:
        return []
    return [f"index.json build '{build}' but the file name says '{parts[2]}'"]


def _depends(pkg: CondaArchive) -> list[Any]:
    depends = pkg.index.get("depends")
    return list(depends) if isinstance(depends, list) else []


def c1112(pkg: CondaArchive) -> Outcome:
    return [] if isinstance(pkg.index.get("depends"), list) else ["info/index.json has no depends list"]


def c1113(pkg: CondaArchive) -> Outcome:
    return ["an empty dependency"] if any(not str(d).strip() for d in _depends(pkg)) else []


def c1114(pkg: CondaArchive) -> Outcome:
    from rattler import MatchSpec
    from rattler.exceptions import InvalidMatchSpecError

    problems: list[str] = []
    for dep in map(str, _depends(pkg)):
        tokens = dep.split()
        if not tokens:
            continue
        if len(tokens) > 3 or not NAME.fullmatch(tokens[0]):
            problems.append(f"'{dep}'")
            continue
        try:
            MatchSpec(dep, strict=False)
        except InvalidMatchSpecError as exc:
            problems.append(f"'{dep}': {exc}")
    return problems


def c1115(pkg: CondaArchive) -> Outcome:
    family = pkg.index.get("license_family", pkg.index.get("license"))
    if str(family).upper() in LICENSE_FAMILIES:
        return []
    return [f"license family '{family}' is not one of {', '.join(sorted(LICENSE_FAMILIES))}"]


def c1116(pkg: CondaArchive) -> Outcome:
    return [] if is_ascii(pkg.info["info/index.json"], pkg.is_windows) else ["info/index.json has non-ASCII bytes"]


def c1117(pkg: CondaArchive) -> Outcome:
    counts = Counter(m.name for m in (*pkg.info_members, *pkg.pkg_members))
    return [f"{name} ({n} times)" for name, n in sorted(counts.items()) if n > 1]


def c1118(pkg: CondaArchive) -> Outcome:
    return [repr(m.name) for m in (*pkg.info_members, *pkg.pkg_members) if not is_ascii(m.name.encode("utf-8"))]


def _info_files(pkg: CondaArchive) -> list[str] | None:
    raw = pkg.info.get("info/files")
    return None if raw is None else [line.strip() for line in raw.decode("utf-8", "replace").splitlines()]


NO_INFO_FILES = "no info/files in the package (rattler-build lists the payload in info/paths.json only)"


def c1119(pkg: CondaArchive) -> Outcome:
    raw = pkg.info.get("info/files")
    if raw is None:
        return NO_INFO_FILES
    return [] if is_ascii(raw, pkg.is_windows) else ["info/files has non-ASCII bytes"]


def c1120(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    return NO_INFO_FILES if listed is None else [f for f in listed if f.startswith("info/")]


def c1121(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    return [f"{name} ({n} times)" for name, n in sorted(Counter(listed).items()) if n > 1]


def c1122(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    present = {m.name for m in pkg.files()}
    return [
        f"{f} is listed but not in the archive" for f in listed if f and not f.startswith("info") and f not in present
    ]


def c1123(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    known = set(listed)
    return [f"{m.name} is not listed" for m in pkg.files() if m.name not in known]


def c1124(pkg: CondaArchive) -> Outcome:
    problems = [f"hard link {m.name}" for m in (*pkg.info_members, *pkg.pkg_members) if m.kind == "hardlink"]
    if pkg.is_windows:
        problems += [
            f"symlink {m.name} (Windows cannot create it without privileges)"
            for m in pkg.pkg_members
            if m.kind == "symlink"
        ]
    return problems


def c1125(pkg: CondaArchive) -> Outcome:
    problems: list[str] = []
    for member in pkg.pkg_members:
        path = PurePosixPath(member.name)
        if (path.parts and path.parts[0] in FORBIDDEN_TOP) or path.name == ".DS_Store" or member.name.endswith("~"):
            problems.append(member.name)
    return problems


def c1126(pkg: CondaArchive) -> Outcome:
    if pkg.subdir == "noarch" or "preferred_env" in pkg.index:
        return "a noarch package may have info/link.json"
    return [
        f"{name} in a {pkg.subdir} package"
        for name in ("info/link.json", "info/package_metadata.json")
        if name in pkg.info
    ]


def c1127(pkg: CondaArchive) -> Outcome:
    names = {m.name.lower(): m.name for m in pkg.files()}
    return [
        f"{names[n]} and {names[n[:-4] + '.exe']}"
        for n in sorted(names)
        if n.endswith(".bat") and n[:-4] + ".exe" in names
    ]


def c1128(pkg: CondaArchive) -> Outcome:
    raw = pkg.info.get("info/has_prefix")
    problems = [] if raw is None or is_ascii(raw, pkg.is_windows) else ["info/has_prefix has non-ASCII bytes"]
    return problems + [e.path for e in _prefix_entries(pkg) if not is_ascii(e.path.encode("utf-8"))]


def c1129(pkg: CondaArchive) -> Outcome:
    present = {m.name for m in pkg.files()}
    return [f"{e.path} ({e.source})" for e in _prefix_entries(pkg) if e.path not in present]


def c1130(pkg: CondaArchive) -> Outcome:
    return [f"{e.path}: mode '{e.mode}'" for e in _prefix_entries(pkg) if e.mode not in ("text", "binary")]


def c1131(pkg: CondaArchive) -> Outcome:
    if pkg.index.get("name") != "python":
        return "only the python package is refused binary prefixes"
    return [e.path for e in _prefix_entries(pkg) if e.mode == "binary"]


def c1132(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    return [e.path for e in _prefix_entries(pkg) if e.mode == "binary"]


def c1133(pkg: CondaArchive) -> Outcome:
    return [
        f"{e.path}: {len(e.placeholder)} bytes"
        for e in _prefix_entries(pkg)
        if e.mode == "binary" and len(e.placeholder) != BINARY_PLACEHOLDER_LENGTH
    ]


def _paths_matching(pkg: CondaArchive, test: Callable[[str], bool]) -> list[str]:
    return [m.name for m in pkg.files() if test(m.name)]


def c1134(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(LINK_SCRIPTS))


def c1135(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".egg"))


def c1136(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.startswith(("bin/easy_install", "Scripts/easy_install")))


def c1137(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".pth"))


def c1138(pkg: CondaArchive) -> Outcome:
    if pkg.index.get("name") == "python":
        return "the python package may ship .pyo files"
    return _paths_matching(pkg, lambda p: p.endswith(".pyo"))


def c1139(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".pyc") and "site-packages" not in p and "distutils" not in p)


def c1140(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: "lib2to3" in p and p.endswith(".pickle"))


def c1141(pkg: CondaArchive) -> Outcome:
    build = str(pkg.index.get("build", ""))
    if "py3" in build:
        return f"a Python 3 package (build '{build}'): .pyc files are made at install or import time"
    names = {m.name for m in pkg.files()}
    return [n for n in sorted(names) if "/site-packages/" in n and n.endswith(".py") and n + "c" not in names]


def _menus(pkg: CondaArchive) -> list[str]:
    return _paths_matching(pkg, lambda p: p.startswith("Menu/") and p.endswith(".json"))


def c1142(pkg: CondaArchive) -> Outcome:
    menus = _menus(pkg)
    if len(menus) != 1:
        return "no single Menu json in the package"
    expected = f"Menu/{pkg.index.get('name')}.json"
    return [] if menus[0] == expected else [f"{menus[0]} should be {expected}"]


def c1143(pkg: CondaArchive) -> Outcome:
    menus = _menus(pkg)
    return [", ".join(menus)] if len(menus) > 1 else []


def c1144(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    arch = pkg.index.get("arch")
    expected = "x86_64" if pkg.subdir == "win-64" else "x86"
    return [] if arch == expected else [f"arch '{arch}' in a {pkg.subdir} package (expected {expected})"]


def c1145(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    expected = "AMD64" if pkg.subdir == "win-64" else "I386"
    problems: list[str] = []
    for member in pkg.files():
        if member.kind == "file" and member.name.lower().endswith(PE_SUFFIXES):
            machine = pe_machine(member.head)
            if machine != expected:
                problems.append(f"{member.name}: {machine}")
    return problems


def _hash_and_size(pkg: CondaArchive) -> tuple[list[str], list[str], str]:
    paths, problem = _paths_json(pkg)
    by_path = {str(p["_path"]): p for p in paths}
    sha_problems: list[str] = []
    size_problems: list[str] = []
    for member in pkg.files():
        entry = by_path.get(member.name)
        if member.kind != "file" or entry is None:
            continue  # links have no content; unlisted files are TB101's
        if entry.get("sha256") != member.sha256:
            sha_problems.append(
                f"{member.name}: {member.sha256[:12]}... in the archive, "
                f"{str(entry.get('sha256'))[:12]}... in paths.json"
            )
        if entry.get("size_in_bytes") != member.size:
            size_problems.append(f"{member.name}: {member.size} bytes, paths.json says {entry.get('size_in_bytes')}")
    return sha_problems, size_problems, problem


def c1146(pkg: CondaArchive) -> Outcome:
    sha, _, problem = _hash_and_size(pkg)
    return [problem] if problem else sha


def c1147(pkg: CondaArchive) -> Outcome:
    _, size, problem = _hash_and_size(pkg)
    return [problem] if problem else size


def tb101(pkg: CondaArchive) -> Outcome:
    paths, problem = _paths_json(pkg)
    if problem:
        return [problem]
    listed = Counter(str(p["_path"]) for p in paths)
    present = {m.name for m in pkg.files()}
    problems = [f"{p} is listed twice" for p, n in sorted(listed.items()) if n > 1]
    problems += [f"{p} is listed but not in the payload" for p in sorted(set(listed) - present)]
    problems += [f"{p} is in the payload but not listed" for p in sorted(present - set(listed))]
    return problems


def longest_windows_paths(pkg: CondaArchive) -> tuple[str, str]:
    """The longest installed path in a typical environment, and in the package cache (pkgs/<dist>/)."""
    relative = max((m.name for m in pkg.files()), key=len, default="")
    native = relative.replace("/", "\\")
    return WIN_ENV_PREFIX + native, WIN_USER_HOME + "pkgs\\" + pkg.stem + "\\" + native


def tb102(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    limit = WIN_MAX_PATH - 1
    in_env, in_cache = longest_windows_paths(pkg)
    return [
        f"{where}: {len(path)} characters, over MAX_PATH ({limit}): {path}"
        for where, path in (("installed", in_env), ("package cache", in_cache))
        if len(path) > limit
    ]


def tb102_note(pkg: CondaArchive) -> str:
    limit = WIN_MAX_PATH - 1
    in_env, in_cache = longest_windows_paths(pkg)
    worst = max(len(in_env), len(in_cache))
    relative = max((m.name for m in pkg.files()), key=len, default="")
    return (
        f"longest path {len(in_env)} characters installed, {len(in_cache)} in the package cache "
        f"(limit {limit}, {limit - worst} to spare): {relative}"
    )


def tb103(pkg: CondaArchive) -> Outcome:
    if pkg.format != "conda":
        return "a .tar.bz2 has no outer container"
    expected = {"metadata.json", f"info-{pkg.stem}.tar.zst", f"pkg-{pkg.stem}.tar.zst"}
    names = [e.name for e in pkg.container]
    problems = [f"unexpected entry {n}" for n in names if n not in expected]
    problems += [f"missing {n}" for n in sorted(expected - set(names))]
    problems += [f"{e.name} is compressed (the outer zip must store)" for e in pkg.container if not e.stored]
    if pkg.metadata_json is not None:
        try:
            version = json.loads(pkg.metadata_json).get("conda_pkg_format_version")
        except (ValueError, AttributeError):
            version = None
        if version != 2:
            problems.append(f"metadata.json conda_pkg_format_version is {version!r}, not 2")
    return problems


CHECKS: Sequence[tuple[str, Callable[[CondaArchive], Outcome]]] = (
    ("C1101", c1101),
    ("C1102", c1102),
    ("C1103", c1103),
    ("C1104", c1104),
    ("C1105", c1105),
    ("C1106", c1106),
    ("C1107", c1107),
    ("C1108", c1108),
    ("C1109", c1109),
    ("C1110", c1110),
    ("C1111", c1111),
    ("C1112", c1112),
    ("C1113", c1113),
    ("C1114", c1114),
    ("C1115", c1115),
    ("C1116", c1116),
    ("C1117", c1117),
    ("C1118", c1118),
    ("C1119", c1119),
    ("C1120", c1120),
    ("C1121", c1121),
    ("C1122", c1122),
    ("C1123", c1123),
    ("C1124", c1124),
    ("C1125", c1125),
    ("C1126", c1126),
    ("C1127", c1127),
    ("C1128", c1128),
    ("C1129", c1129),
    ("C1130", c1130),
    ("C1131", c1131),
    ("C1132", c1132),
    ("C1133", c1133),
    ("C1134", c1134),
    ("C1135", c1135),
    ("C1136", c1136),
    ("C1137", c1137),
    ("C1138", c1138),
    ("C1139", c1139),
    ("C1140", c1140),
    ("C1141", c1141),
    ("C1142", c1142),
    ("C1143", c1143),
    ("C1144", c1144),
    ("C1145", c1145),
    ("C1146", c1146),
    ("C1147", c1147),
    ("TB101", tb101),
    ("TB102", tb102),
    ("TB103", tb103),
)
NOTES: Mapping[str, Callable[[CondaArchive], str]] = {"TB102": tb102_note}


def run_checks(pkg: CondaArchive) -> list[Check]:
    checks: list[Check] = []
    for code, check in CHECKS:
        outcome = check(pkg)
        if isinstance(outcome, str):
            checks.append(skipped(code, pkg.path, outcome))
        else:
            note = NOTES[code](pkg) if code in NOTES and not outcome else ""
            checks.append(result(code, pkg.path, outcome, note))
    return checks


def check_package(path: Path) -> list[Check]:
    """All package checks of the conda package at ``path``; an unreadable file gives one failed TB100."""
    try:
        pkg = read_package(path)
    except PackageUnreadable as exc:
        return [result("TB100", path, [str(exc)])]
    return [result("TB100", path, [], f"{pkg.format}, {len(pkg.files()):,} payload files"), *run_checks(pkg)]
