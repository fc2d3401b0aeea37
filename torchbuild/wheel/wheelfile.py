"""Reading and validating wheel files: the name (PEP 427 / packaging), the tags a cell expects (``Expected``, which
the Plan gives), member paths, and the .dist-info metadata: the one reader of a wheel's METADATA, WHEEL and RECORD.

Failures raise ``WheelError`` with one line that names the file, what was expected and what was found; a stage turns
it into ``StageFailed`` (``errors.as_stage_failure``): this module knows no stage.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import io
import re
import zipfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torchbuild.errors import one_of
from torchbuild.host import archives

if TYPE_CHECKING:
    import email.message

DISTRIBUTION = "torch"
_DRIVE = re.compile(r"^[A-Za-z]:")


class WheelError(ValueError):
    """A wheel that cannot be used; the message names the file."""


@dataclass(frozen=True)
class WheelName:
    """What a wheel's file name says (PEP 427)."""

    filename: str
    name: str  # canonical distribution name
    version: Version
    tags: frozenset[Tag]

    @property
    def interpreters(self) -> frozenset[str]:
        return frozenset(t.interpreter for t in self.tags)

    @property
    def abis(self) -> frozenset[str]:
        return frozenset(t.abi for t in self.tags)

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(t.platform for t in self.tags)

    @property
    def dist_info(self) -> str:
        """The .dist-info directory the name implies (names normalised with '_' as PEP 427 says)."""
        return f"{self.name.replace('-', '_')}-{self.version}.dist-info"


def parse_name(path: Path | str) -> WheelName:
    filename = Path(path).name
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise WheelError(f"{filename} is not a valid wheel file name: {exc}") from None
    return WheelName(filename=filename, name=str(name), version=version, tags=tags)


def open_wheel(path: Path) -> zipfile.ZipFile:
    """Open a wheel as a zip archive. WheelError when it is missing, not a zip, truncated, or would unpack past the
    limits of host/archives.py (a decompression bomb)."""
    if path.is_dir():
        raise WheelError(f"{path} is a directory, not a wheel file")
    if not path.is_file():
        raise WheelError(f"wheel not found: {path}")
    try:
        return archives.open_zip(path, str(path))
    except (zipfile.BadZipFile, OSError) as exc:
        raise WheelError(f"{path} is not a wheel (not a zip archive / truncated): {exc}") from None
    except archives.TooLarge as exc:
        raise WheelError(str(exc)) from None


def unsafe_member(name: str) -> str | None:
    """Why a member name would escape the install root, or None if it is safe."""
    normal = name.replace("\\", "/")
    if normal.startswith("/"):
        return "absolute path"
    if _DRIVE.match(normal):
        return "drive letter"
    if ".." in normal.split("/"):
        return "'..' component"
    if "\x00" in normal:
        return "NUL byte"
    return None


def unsafe_members(archive: zipfile.ZipFile) -> list[tuple[str, str]]:
    return [(n, why) for n in archive.namelist() if (why := unsafe_member(n)) is not None]


def find_dist_info(archive: zipfile.ZipFile) -> str:
    """The archive's one top-level .dist-info directory; WheelError naming the file when there is not exactly one."""
    found = sorted({n.split("/", 1)[0] for n in archive.namelist() if n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        what = "none" if not found else ", ".join(found)
        name = Path(archive.filename or "the wheel").name
        raise WheelError(f"{name}: expected one .dist-info directory, found {what}")
    return found[0]


def dist_info_dir(archive: zipfile.ZipFile, wheel: WheelName) -> str:
    """The archive's one top-level .dist-info directory, checked against the file name."""
    found = [find_dist_info(archive)]
    stem = found[0][: -len(".dist-info")]
    name, _, version = stem.rpartition("-")
    try:
        same_version = Version(version) == wheel.version
    except InvalidVersion:
        same_version = False
    if canonicalize_name(name) != wheel.name or not same_version:
        raise WheelError(
            f"{wheel.filename}: its metadata directory {found[0]} does not match the file name "
            f"(expected {wheel.dist_info})"
        )
    return found[0]


def read_dist_info(archive: zipfile.ZipFile, wheel: WheelName, member: str) -> email.message.Message:
    """METADATA or WHEEL (RFC 822 style) from the .dist-info directory."""
    import email.parser  # the email package: only where metadata is read

    path = f"{dist_info_dir(archive, wheel)}/{member}"
    try:
        text = archive.read(path).decode("utf-8")
    except KeyError:
        raise WheelError(f"{wheel.filename}: {path} is missing") from None
    except (zipfile.BadZipFile, UnicodeDecodeError, OSError) as exc:
        raise WheelError(f"{wheel.filename}: cannot read {path}: {exc}") from None
    return email.parser.Parser().parsestr(text)


def read_metadata(path: Path) -> email.message.Message:
    """Any wheel's METADATA (a provider wheel, a dependency): its one .dist-info's, without checking its name against
    the file's. WheelError naming the file when it cannot be read."""
    import email.parser  # the email package: only where metadata is read

    with open_wheel(path) as archive:
        member = f"{find_dist_info(archive)}/METADATA"
        try:
            text = archive.read(member).decode("utf-8", "replace")
        except KeyError:
            raise WheelError(f"{path.name}: {member} is missing") from None
        except (zipfile.BadZipFile, OSError) as exc:
            raise WheelError(f"{path.name}: cannot read {member}: {exc}") from None
    return email.parser.Parser().parsestr(text)


def record_digest(algorithm: str, handle: IO[bytes]) -> tuple[str, int]:
    """RECORD's form of a digest (urlsafe base64 without padding) of what ``handle`` reads, and its size."""
    digest = hashlib.new(algorithm)
    size = 0
    while block := handle.read(1 << 20):
        digest.update(block)
        size += len(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii"), size


def record_hash(data: bytes) -> str:
    """RECORD's hash field for ``data``: ``sha256=<urlsafe base64>``."""
    return "sha256=" + record_digest("sha256", io.BytesIO(data))[0]


def wheel_file_tags(archive: zipfile.ZipFile, wheel: WheelName) -> frozenset[Tag]:
    return _tags(read_dist_info(archive, wheel, "WHEEL"), wheel)


def _tags(message: email.message.Message, wheel: WheelName) -> frozenset[Tag]:
    """The Tag lines of a wheel's WHEEL file."""
    tags: set[Tag] = set()
    for line in message.get_all("Tag") or ():
        parts = str(line).strip().split("-")
        if len(parts) != 3 or not all(parts):
            raise WheelError(f"{wheel.filename}: malformed 'Tag: {line}' in {wheel.dist_info}/WHEEL")
        tags.add(Tag(*parts))
    return frozenset(tags)


@dataclass(frozen=True)
class WheelInfo:
    """What the conda stage (and the smoke stages) need of a wheel's .dist-info."""

    path: Path
    name: str  # the distribution name as in METADATA
    version: str
    dist_info: str  # e.g. torch-2.13.0+cpu.dist-info
    requires: tuple[str, ...]  # Requires-Dist, verbatim
    tags: tuple[str, ...]  # WHEEL's Tag lines
    entry_points: Mapping[str, Mapping[str, str]]  # group -> script name -> "module:attr"

    @property
    def data_dir(self) -> str:
        return self.dist_info.removesuffix(".dist-info") + ".data"


def read_wheel(path: Path, archive: zipfile.ZipFile | None = None) -> WheelInfo:
    """A wheel's .dist-info: name, version, Requires-Dist, tags and entry points. WheelError naming the file.
    ``archive``: the wheel as its caller opened it (``open_wheel``), read here without opening it again."""
    if archive is None:
        with open_wheel(path) as opened:
            return read_wheel(path, opened)
    import email.parser  # the email package: only where metadata is read

    name = parse_name(path)
    dist_info = dist_info_dir(archive, name)  # the directory's names, scanned once

    def member(file: str, required: bool = True) -> str:
        try:
            return archive.read(f"{dist_info}/{file}").decode("utf-8")
        except KeyError:
            if not required:
                return ""
            raise WheelError(f"{name.filename}: {dist_info}/{file} is missing") from None
        except (zipfile.BadZipFile, UnicodeDecodeError, OSError) as exc:
            raise WheelError(f"{name.filename}: cannot read {dist_info}/{file}: {exc}") from None

    metadata = email.parser.Parser().parsestr(member("METADATA"))
    tags = _tags(email.parser.Parser().parsestr(member("WHEEL")), name)
    entry_text = member("entry_points.txt", required=False)
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names are case-sensitive
    try:
        parser.read_string(entry_text)
    except configparser.Error as exc:
        raise WheelError(f"{path}: {dist_info}/entry_points.txt cannot be parsed: {exc}") from None
    return WheelInfo(
        path=path,
        name=str(metadata.get("Name", "")),
        version=str(metadata.get("Version", "")),
        dist_info=dist_info,
        requires=tuple(str(r) for r in metadata.get_all("Requires-Dist") or ()),
        tags=tuple(sorted(str(t) for t in tags)),
        entry_points={group: dict(parser.items(group)) for group in parser.sections()},
    )


# --- what a Plan expects ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WheelTags:
    """The tags of a cell's wheel, resolved into the Plan."""

    interpreter: str  # cp311
    abi: str  # cp311; cp37m before Python 3.8
    platform: str  # win_amd64, manylinux_2_28_x86_64
    # Platform tags of an input wheel that can become ``platform`` (the repair stage retags), most preferred first.
    accepted_platforms: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What a cell's input wheel must be (``Plan.expected_wheel``): its version and tags, and for messages the cell
    and the Plan's wheel name."""

    version: str  # the Plan's version, or the plain release of PyPI's unlabelled wheel of the same build
    tags: WheelTags
    platform: str  # the cell's conda subdir
    cell_id: str
    wheel: str  # the Plan's wheel file name
    distribution: str = DISTRIBUTION  # torch; a package compiled beside it: its own


def expected_problems(wheel: WheelName, want: Expected) -> list[str]:
    """What in the file name does not fit what the cell expects (empty when it fits)."""
    tags = want.tags
    expected = want.version
    problems = []
    if wheel.name != canonicalize_name(want.distribution):
        problems.append(f"distribution '{wheel.name}', expected '{want.distribution}'")
    if wheel.version != Version(expected):
        problems.append(f"version {wheel.version}, expected {expected}")
    if tags.interpreter not in wheel.interpreters:
        problems.append(f"python tag {one_of(sorted(wheel.interpreters))}, expected {tags.interpreter}")
    elif tags.abi not in wheel.abis:
        problems.append(f"abi tag {one_of(sorted(wheel.abis))}, expected {tags.abi}")
    if not wheel.platforms & set(tags.accepted_platforms):
        problems.append(
            f"platform tag {one_of(sorted(wheel.platforms))}, expected one that becomes {tags.platform} "
            f"for {want.platform}: {one_of(tags.accepted_platforms)}"
        )
    return problems


def validate(path: Path, want: Expected) -> WheelName:
    """Everything the source stage needs to trust an input wheel; WheelError naming the file otherwise."""
    if not path.exists():
        raise WheelError(f"wheel not found: {path}")
    with open_wheel(path) as archive:
        wheel = parse_name(path)
        problems = expected_problems(wheel, want)
        if problems:
            raise WheelError(f"{path} is not the wheel of {want.cell_id} ({want.wheel}): " + "; ".join(problems))
        bad = unsafe_members(archive)
        if bad:
            listed = ", ".join(f"{n!r} ({why})" for n, why in bad[:5])
            raise WheelError(f"{path} has members that escape the install root: {listed}")
        inside = wheel_file_tags(archive, wheel)
        if inside != wheel.tags:
            raise WheelError(
                f"{path}: the tags in {wheel.dist_info}/WHEEL ({', '.join(sorted(map(str, inside)))}) differ "
                f"from the file name's ({', '.join(sorted(map(str, wheel.tags)))})"
            )
        read_dist_info(archive, wheel, "METADATA")
    return wheel


def without_requirements(metadata: bytes, names: Collection[str]) -> tuple[bytes, list[str]]:
    """METADATA without the Requires-Dist headers of the projects ``names`` (canonical), every other byte kept;
    and the requirements dropped, as written."""
    kept: list[bytes] = []
    dropped: list[str] = []
    lines = metadata.splitlines(keepends=True)
    in_headers = True
    for line in lines:
        if in_headers and line.strip() == b"":
            in_headers = False
        header, _, value = line.partition(b":")
        if in_headers and header.strip().lower() == b"requires-dist":
            text = value.decode("utf-8").strip()
            try:
                name = canonicalize_name(Requirement(text).name)
            except InvalidRequirement as exc:
                raise WheelError(f"METADATA: Requires-Dist {text!r} is not a requirement: {exc}") from None
            if name in names:
                dropped.append(text)
                continue
        kept.append(line)
    return b"".join(kept), dropped


def _declared_names(headers: list[bytes]) -> set[str]:
    """The projects the Requires-Dist ``headers`` declare unconditionally of extras (canonical names)."""
    names: set[str] = set()
    for line in headers:
        text = line.partition(b":")[2].decode("utf-8").strip()
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise WheelError(f"METADATA: Requires-Dist {text!r} is not a requirement: {exc}") from None
        if requirement.marker is None or "extra" not in str(requirement.marker):
            names.add(canonicalize_name(requirement.name))
    return names


def with_requirements(metadata: bytes, lines: Sequence[str]) -> tuple[bytes, list[str]]:
    """METADATA with a Requires-Dist header for each of ``lines`` whose project it does not declare yet, written
    verbatim after its last Requires-Dist (or at the end of its headers), every other byte kept; and the lines
    added."""
    rows = metadata.splitlines(keepends=True)
    end = next((i for i, row in enumerate(rows) if row.strip() == b""), len(rows))  # the blank line before the body
    is_requirement = [row.partition(b":")[0].strip().lower() == b"requires-dist" for row in rows[:end]]
    declared = _declared_names([row for row, yes in zip(rows, is_requirement, strict=False) if yes])
    added = [line for line in lines if canonicalize_name(Requirement(line).name) not in declared]
    if not added:
        return metadata, []
    at = end
    if any(is_requirement):
        at = max(i for i, yes in enumerate(is_requirement) if yes) + 1
        while at < end and rows[at][:1] in (b" ", b"\t"):  # a folded header's continuation
            at += 1
    newline = next((row[len(row.rstrip(b"\r\n")):] for row in rows[:end] if row.endswith(b"\n")), b"\n")
    if at > 0 and not rows[at - 1].endswith(b"\n"):
        rows[at - 1] += newline
    headers = [f"Requires-Dist: {line}".encode() + newline for line in added]
    return b"".join([*rows[:at], *headers, *rows[at:]]), added
