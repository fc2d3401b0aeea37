"""Installing a wheel into a prefix with ``installer`` (pypa), laid out by an install scheme: the payload of the
cell's conda package (the conda stage), and the wheels of a Windows environment under Wine (the smoke, verify's
loader check). Errors are UserErrors; the stage that calls names itself.

installer places each member by the scheme (``.data/<key>/`` to the scheme's key), writes RECORD from what it wrote
and makes the console and GUI scripts the wheel declares: on Windows the ``.exe`` launchers pip makes
(``Script.generate(kind="win-amd64")``), which start ``python.exe`` one folder up, as conda lays out ``Scripts``;
elsewhere a script that finds the environment's ``python`` beside itself. Neither names the prefix, so the files
need no prefix placeholder and the package stays relocatable.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import io
import os
import posixpath
import stat
import zipfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.records import Hash, RecordEntry, parse_record_file
from installer.scripts import Script
from installer.sources import WheelContentElement, WheelFile
from installer.utils import Scheme, construct_record_file

from torchbuild.errors import UserError, one_of
from torchbuild.wheel import wheelfile

if TYPE_CHECKING:
    from installer.scripts import LauncherKind, ScriptSection

# The shebang of a script in a Windows environment's Scripts folder: the launcher replaces <launcher_dir> with its
# own folder, so the script runs with the environment's python.exe wherever the environment is.
WINDOWS_INTERPRETER = "<launcher_dir>\\..\\python.exe"
# A script that finds the environment's python next to itself, so no prefix placeholder is needed: the shell runs
# line 2; Python sees lines 2-3 as a string. This is the form pip (distlib) writes for long shebangs.
UNIX_SCRIPT_HEAD = b"""#!/bin/sh
'''exec' "$(dirname -- "$(readlink -f -- "$0")")/python" "$0" "$@"
' '''
"""
POSIX_PLACEHOLDER = "python"  # installer writes '#!python'; the head above replaces that line
HASH = "sha256"
LAUNCHER_MAIN = "__main__.py"  # the script a Windows launcher runs, in the zip appended to it
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Payload:
    root: Path  # the prefix: its files are the package's payload
    files: int
    size: int
    scripts: tuple[str, ...]  # the scripts made from entry points, relative to the prefix ('/'-separated)
    left_out: tuple[str, ...] = ()  # wheel members not installed (a run dependency provides them)


LARGE_MEMBER = 16 << 20
BLOCK = 16 << 20


class _Large:
    """A large member outside .data/, inflated by the destination's helper thread rather than in installer's
    loop."""

    def __init__(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
        self.archive, self.info = archive, info


class _Source(WheelFile):
    """The wheel as installer reads it, less the members ``leave_out`` names, with the content ``replace`` gives
    (members it names that the wheel lacks are added)."""

    def __init__(self, archive: zipfile.ZipFile, leave_out: Collection[str], replace: Mapping[str, bytes]) -> None:
        super().__init__(archive)
        self._archive = archive
        self._replace = dict(replace)
        self._skipped = frozenset(leave_out) | frozenset(replace)

    def get_contents(self) -> Iterator[WheelContentElement]:
        """As installer's own, the large members first: the destination's helper starts on them at once."""
        rows = parse_record_file(self.read_dist_info("RECORD").splitlines())
        records = {row[0]: row for row in rows}
        members = [
            m
            for m in self._archive.infolist()
            if not m.is_dir() and m.filename not in self._skipped and "__pycache__" not in m.filename.split("/")[:-1]
        ]  # installer would leave __pycache__/ out too (a security risk), with a warning on the terminal
        # .data/ members stay in the loop: installer reads a script's first line to fix its shebang
        large = {
            m.filename for m in members if m.file_size >= LARGE_MEMBER and not m.filename.startswith(self.data_dir)
        }
        members.sort(key=lambda m: m.filename not in large)  # stable: zip order within each group
        for info in members:
            record = records.get(info.filename, (info.filename, "", ""))
            mode = info.external_attr >> 16
            executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
            if info.filename in large:
                yield record, cast(BinaryIO, _Large(self._archive, info)), executable
                continue
            with self._archive.open(info) as stream:
                yield record, cast(BinaryIO, stream), executable
        for path, data in sorted(self._replace.items()):
            yield (path, "", ""), io.BytesIO(data), False


@dataclass
class _Prefix(SchemeDictionaryDestination):
    """installer's destination for a staging prefix: normalised modes (0755 / 0644, whatever the umask), scripts
    that name no prefix, and RECORD paths relative to the root scheme's folder on every host (installer writes
    absolute paths for the other schemes when it runs on Windows).

    The few large members (torch's shared libraries) are inflated and hashed by a helper thread while installer's
    loop writes the many small ones (zlib, hashing and file writes release the GIL, so two cores work); their
    RECORD rows are completed before RECORD is written."""

    windows: bool = False
    helper: concurrent.futures.Executor | None = None
    written: list[RecordEntry] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    _pending: list[tuple[RecordEntry, concurrent.futures.Future[tuple[str, int]]]] = field(default_factory=list)
    _folders: set[str] = field(default_factory=set)

    def write_file(
        self, scheme: Scheme, path: str | os.PathLike[str], stream: BinaryIO, is_executable: bool
    ) -> RecordEntry:
        if scheme == "scripts" and self.windows:
            # A '#!python' line means nothing to Windows; pip leaves such a script as it is there too.
            return self.write_to_fs(scheme, os.fspath(path), stream, is_executable)
        return super().write_file(scheme, path, stream, is_executable)

    def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
        if scheme == "scripts" and not self.windows:
            data = stream.read()
            if data.startswith(b"#!" + POSIX_PLACEHOLDER.encode() + b"\n"):
                data = UNIX_SCRIPT_HEAD + data.split(b"\n", 1)[1]
                is_executable = True
            stream = io.BytesIO(data)
        root = os.path.abspath(self.scheme_dict[scheme])
        target = os.path.abspath(os.path.join(root, path))
        if not target.startswith(root + os.sep):
            raise ValueError(f"{path} would be written outside {root}")
        folder = os.path.dirname(target)
        if folder not in self._folders:
            os.makedirs(folder, exist_ok=True)
            self._folders.add(folder)
        entry = RecordEntry(path, None, None)
        mode = 0o755 if is_executable else 0o644
        if isinstance(stream, _Large) and self.helper is not None:
            self._pending.append(
                (entry, self.helper.submit(_copy_member, stream, target, mode, self.overwrite_existing))
            )
        else:
            digest, entry.size = _copy(stream, target, mode, self.overwrite_existing)
            entry.hash_ = Hash(HASH, digest)
        self.written.append(entry)
        return entry

    def write_script(self, name: str, module: str, attr: str, section: ScriptSection) -> RecordEntry:
        script_name, data = Script(name, module, attr, section).generate(self.interpreter, self.script_kind)
        if self.script_kind != "posix":
            data = _fixed_date(data)
        entry = self.write_to_fs(Scheme("scripts"), script_name, io.BytesIO(data), is_executable=True)
        self.scripts.append(entry.path)
        return entry

    def finalize_installation(
        self, scheme: Scheme, record_file_path: str, records: Iterable[tuple[Scheme, RecordEntry]]
    ) -> None:
        for entry, done in self._pending:
            digest, entry.size = done.result()
            entry.hash_ = Hash(HASH, digest)
        root = self.scheme_dict[scheme]

        def prefix(other: Scheme) -> str | None:
            folder = self.scheme_dict[other]
            return None if folder == root else Path(os.path.relpath(folder, root)).as_posix() + "/"

        with construct_record_file(list(records), prefix) as record:
            self.write_to_fs(scheme, record_file_path, record, is_executable=False)


def _fixed_date(launcher: bytes) -> bytes:
    """A Windows launcher whose appended zip (``__main__.py``) carries a fixed date instead of the clock's, so that
    the same wheel gives the same bytes. The zip is rebuilt as installer builds it; only its date differs."""
    with zipfile.ZipFile(io.BytesIO(launcher)) as made:
        code = made.read(LAUNCHER_MAIN)
    rebuilt = io.BytesIO()
    with zipfile.ZipFile(rebuilt, "w") as archive:
        info = zipfile.ZipInfo(LAUNCHER_MAIN, date_time=ZIP_EPOCH)
        info.external_attr = 0o600 << 16  # what ZipFile.writestr gives a member named by a string
        archive.writestr(info, code)
    tail = rebuilt.getvalue()
    head = launcher[: len(launcher) - len(tail)]
    if not head.endswith(b"\n"):
        raise ValueError("installer's Windows launcher is not <launcher><shebang line><zip> any more")
    return head + tail


def _copy(stream: BinaryIO, target: str, mode: int, overwrite: bool = False) -> tuple[str, int]:
    """Write ``stream`` to the new file ``target`` (FileExistsError if it is there, unless ``overwrite``) with
    ``mode`` whatever the umask; its RECORD hash and size. Large blocks: a helper thread takes the GIL back once per
    block (installer's own copy takes 64 KiB blocks)."""
    digest = hashlib.new(HASH)
    size = 0
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL) | getattr(os, "O_BINARY", 0)
    fd = os.open(target, flags, mode)
    with open(fd, "wb") as out:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        while block := stream.read(BLOCK):
            digest.update(block)
            out.write(block)
            size += len(block)
    if not hasattr(os, "fchmod"):
        os.chmod(target, mode)
    return base64.urlsafe_b64encode(digest.digest()).decode("ascii").rstrip("="), size


def _copy_member(member: _Large, target: str, mode: int, overwrite: bool) -> tuple[str, int]:
    with member.archive.open(member.info) as stream:
        return _copy(cast(BinaryIO, stream), target, mode, overwrite)


def _check_members(archive: zipfile.ZipFile, path: Path, data_dir: str, scheme: Mapping[str, str]) -> None:
    """Every member lands inside the prefix, in a folder of the scheme: checked before anything is written."""
    bad = wheelfile.unsafe_members(archive)
    if bad:
        name, why = bad[0]
        raise UserError(f"{path}: member {name!r} escapes the install root ({why}); not unpacked")
    for name in archive.namelist():
        first, _, rest = name.partition("/")
        key = rest.partition("/")[0]
        if first == data_dir and not name.endswith("/") and key not in scheme:
            raise UserError(f"{path}: {name} is in {first}/{key}/; valid: {one_of(sorted(scheme))}")


def _entry_points(archive: zipfile.ZipFile, dist_info: str, path: Path) -> None:
    """installer asserts on an entry point without ':attr'; pip refuses it too. Said before anything is written."""
    member = f"{dist_info}/entry_points.txt"
    if member not in archive.namelist():
        return
    section = ""
    for line in archive.read(member).decode("utf-8", "replace").splitlines():
        text = line.strip()
        if text.startswith("["):
            section = text.strip("[]").strip()
        elif section in ("console_scripts", "gui_scripts") and "=" in text and ":" not in text.split("=", 1)[1]:
            raise UserError(f"{path}: entry point {text!r} in [{section}] names no function (module:function)")


def install_wheel(
    wheel: Path | zipfile.ZipFile,
    install_scheme: Mapping[str, str],
    dest: Path,
    *,
    windows: bool,
    leave_out: Collection[str] = (),
    replace: Mapping[str, bytes] | None = None,
    installer_name: str = "conda",
    overwrite: bool = False,
) -> Payload:
    """Install ``wheel`` (its path, or the wheel as its caller opened it, ``wheelfile.open_wheel``, which stays open)
    into the prefix ``dest`` laid out by ``install_scheme`` (folders relative to the prefix; ``{dist}``: the wheel's
    name), for Windows (``windows``) or elsewhere.

    The .dist-info gets INSTALLER (``installer_name``) and a RECORD true to what was written; a file already in
    the prefix is an error, or replaced (``overwrite``: another wheel of the same environment wrote it). The
    members ``leave_out`` names are not installed and RECORD does not list them (a run dependency of the package
    provides them); the members ``replace`` names (added when absent) are installed with its content. Every member
    path is checked before anything is written."""
    if isinstance(wheel, Path):
        try:
            archive = wheelfile.open_wheel(wheel)
        except wheelfile.WheelError as exc:
            raise UserError(str(exc)) from None
        with archive:
            return install_wheel(archive, install_scheme, dest, windows=windows, leave_out=leave_out,
                                 replace=replace, installer_name=installer_name, overwrite=overwrite)  # fmt: skip
    archive, path = wheel, Path(wheel.filename or "the wheel")
    try:
        source = _Source(archive, leave_out, replace or {})
        dist_info = source.dist_info_dir
    except (ValueError, AssertionError) as exc:
        raise UserError(f"{path}: {exc}") from None
    name = dist_info.removesuffix(".dist-info").rpartition("-")[0]
    scheme = {key: value.replace("{dist}", name) for key, value in install_scheme.items()}
    _check_members(archive, path, source.data_dir, scheme)
    _entry_points(archive, dist_info, path)
    kind: LauncherKind = "win-amd64" if windows else "posix"
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as helper:
        destination = _Prefix(
            scheme_dict={key: str(dest / folder) for key, folder in scheme.items()},
            interpreter=WINDOWS_INTERPRETER if windows else POSIX_PLACEHOLDER,
            script_kind=kind,
            windows=windows,
            helper=helper,
            overwrite_existing=overwrite,
        )
        try:
            install(source, destination, {"INSTALLER": f"{installer_name}\n".encode()})
        except (ValueError, OSError, InstallerError) as exc:
            raise UserError(f"{path}: {exc}") from None
    scripts_dir = scheme["scripts"]
    return Payload(
        root=dest,
        files=len(destination.written),
        size=sum(entry.size or 0 for entry in destination.written),
        scripts=tuple(sorted(posixpath.join(scripts_dir, s) for s in destination.scripts)),
        left_out=tuple(sorted(leave_out)),
    )

