"""Downloads pinned by sha256 (a cell's build dependencies, knowledge/build_deps.py; python.org's embeddable CPython):
downloaded with retries and a progress bar, verified, unpacked safely (no member may land outside its folder),
and cached by hash in ``<cache>/deps/<sha256>/``. The wheels of a torch wheel's declared requirements that provide
its libraries (knowledge/cuda_wheels.py) are fetched once the same way: by pip for the target, checked against the
sha256 the data pins, kept in ``<cache>/wheels/<sha256>/`` and their libraries unpacked beside.

Each dependency names the variables it gives the build, e.g. ``CMAKE_INCLUDE_PATH: "{root}/include"`` and
``LIB: "{root}/lib;%LIB%"`` (``%VAR%`` is the value the build environment had before).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from torchbuild.host import archives, pip
from torchbuild.host.files import link, make_empty, temporary_name
from torchbuild.knowledge.build_deps import Dependency, DependencyError
from torchbuild.knowledge.cuda_wheels import PINNED_IN as REQUIREMENTS_PINNED_IN
from torchbuild.knowledge.cuda_wheels import RequirementWheel
from torchbuild.results import sha256_of

RETRIES = 3


# --- download ---------------------------------------------------------------------------------------------


def download(
    url: str,
    dest: Path,
    sha256: str,
    retries: int = RETRIES,
    show_progress: bool = True,
    pinned_in: str = "torchbuild/data/build_deps.yaml",
) -> Path:
    """Download ``url`` to ``dest`` (atomically), retrying transient failures; refuse a wrong sha256 (``pinned_in``:
    the data file that pins it, named in the error)."""
    import urllib.request  # with http and ssl: only when something is downloaded

    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from torchbuild.host.console import console

    dest.parent.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for attempt in range(1, retries + 1):
        tmp = temporary_name(dest)
        try:
            make_empty(tmp)
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=60) as response, tmp.open("wb") as out:
                total = int(response.headers.get("Content-Length") or 0) or None
                with Progress(
                    "{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    console=console, disable=not show_progress, transient=True,
                ) as bar:  # fmt: skip
                    task = bar.add_task(dest.name, total=total)
                    while block := response.read(1 << 20):
                        digest.update(block)
                        out.write(block)
                        bar.advance(task, len(block))
            got = digest.hexdigest()
            if got != sha256:
                raise DependencyError(
                    f"{url}: checksum mismatch: expected sha256 {sha256}, got {got}. The file changed upstream or "
                    "the download was tampered with; nothing was unpacked. If the new file is trusted, update its "
                    f"sha256 in {pinned_in}."
                )
            os.replace(tmp, dest)
            return dest
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            last_error = str(getattr(exc, "reason", exc))
            if isinstance(exc, urllib.error.HTTPError) and 400 <= exc.code < 500 and exc.code != 429:
                break  # not transient
            if attempt < retries:
                time.sleep(min(2**attempt, 10))
        finally:
            tmp.unlink(missing_ok=True)
    raise DependencyError(f"download of {url} failed after {attempt} attempt(s): {last_error}")


# --- unpacking --------------------------------------------------------------------------------------------


def _safe_target(dest: Path, member: str, archive: Path) -> Path:
    target = (dest / member).resolve()
    if not target.is_relative_to(dest.resolve()) or PurePosixPath(member).is_absolute():
        raise DependencyError(f"{archive.name}: member {member!r} would be written outside {dest}; refused.")
    return target


def extract(archive: Path, dest: Path) -> None:
    """Unpack .7z (py7zr), .zip/.whl or .tar.* into ``dest``; any member that escapes ``dest`` (``..``, an absolute
    path, a link) fails the whole archive before anything is written."""
    dest.mkdir(parents=True, exist_ok=True)
    name = archive.name.lower()
    if name.endswith(".7z"):
        import py7zr

        with py7zr.SevenZipFile(archive) as seven:
            entries = seven.list()
            archives.check_total(archive.name, sum(e.uncompressed for e in entries), archive.stat().st_size)
            for entry in entries:
                _safe_target(dest, entry.filename, archive)
                if entry.is_symlink:
                    raise DependencyError(f"{archive.name}: member {entry.filename!r} is a link; refused.")
            seven.extractall(path=dest)
    elif name.endswith((".zip", ".whl")):
        with archives.open_zip(archive) as zipped:
            for info in zipped.infolist():
                _safe_target(dest, info.filename, archive)
            zipped.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            # The standard library's data filter (PEP 706) knows the rules: a hard link's target is relative to the
            # archive's root, a symlink's to its folder; devices, fifos and absolute names are refused. Every member
            # is checked first so that a bad one leaves nothing written.
            members = tar.getmembers()
            archives.check_total(archive.name, sum(m.size for m in members), archive.stat().st_size)
            for member in members:
                try:
                    tarfile.data_filter(member, str(dest))
                except tarfile.FilterError as exc:
                    raise DependencyError(f"{archive.name}: member {member.name!r} refused: {exc}.") from None
            tar.extractall(dest, filter="data")


def fetch(dep: Dependency, cache_dir: Path, show_progress: bool = True) -> Path:
    """The unpacked root of ``dep``, from ``<cache>/deps/<sha256>/`` when it is there."""
    base = cache_dir / "deps" / dep.sha256
    unpacked = base / "root"
    if (base / ".complete").is_file():
        return unpacked / dep.root if dep.root else unpacked
    archive = base / dep.filename
    if not archive.is_file() or sha256_of(archive) != dep.sha256:
        download(dep.url, archive, dep.sha256, show_progress=show_progress)
    staging = Path(tempfile.mkdtemp(prefix=".root-", dir=base))
    try:
        extract(archive, staging)
        if unpacked.exists():
            shutil.rmtree(unpacked)
        os.replace(staging, unpacked)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (base / ".complete").write_text(dep.url + "\n", encoding="utf-8")
    root = unpacked / dep.root if dep.root else unpacked
    if not root.is_dir():
        raise DependencyError(f"{dep.name}: {dep.filename} has no folder {dep.root!r} (the 'root' in build_deps.yaml).")
    return root


def environment(dep: Dependency, root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The variables ``dep`` gives the build: ``{root}`` is its unpacked root, ``%VAR%`` the current value."""
    result = {}
    for name, template in dep.env.items():
        value = template.replace("{root}", str(root))
        result[name] = expand(value, env)
    return result


_REF = re.compile(r"%([A-Za-z_][A-Za-z0-9_()]*)%")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Expand ``%VAR%`` references the way cmd.exe does (case-insensitive names; unknown ones become empty)."""
    upper = {k.upper(): v for k, v in env.items()}
    return _REF.sub(lambda m: upper.get(m.group(1).upper(), ""), value)


# --- the wheels of declared requirements ----------------------------------------------------------------------


def requirement_wheel(wheel: RequirementWheel, target: Sequence[str], cache_dir: Path, log: Path) -> Path:
    """The file of ``wheel`` in ``<cache>/wheels/<sha256>/`` (``target``: pip's options for the cell's platform and
    Python); downloaded by pip the first time and refused unless its name and sha256 are the ones the data pins."""
    return pinned_wheel(wheel.pin, wheel.file, wheel.sha256, target, cache_dir, log, REQUIREMENTS_PINNED_IN)


def pinned_wheel(
    pin: str, file: str, sha256: str, target: Sequence[str], cache_dir: Path, log: Path, pinned_in: str
) -> Path:
    """The wheel ``file`` of ``pin`` (``name==version``) in ``<cache>/wheels/<sha256>/``: chosen by uv's resolver
    for ``target`` and fetched by pip the first time (pip.download), refused unless its name and sha256 are the
    ones ``pinned_in`` (the data file, for the message) pins."""
    entry = cache_dir / "wheels" / sha256 / file
    if entry.is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="incoming-", dir=entry.parent.parent) as tmp:
        try:
            got = pip.download([pin], Path(tmp), log=log, target=target)[-1]
        except pip.PipError as exc:
            raise DependencyError(f"cannot fetch {pin} ({file}): {exc.detail}; log: {log}") from None
        digest = sha256_of(got.path)
        if got.path.name != file or digest != sha256:
            raise DependencyError(
                f"the configured indexes give {got.path.name} (sha256 {digest}) for {pin}; "
                f"{pinned_in} pins {file} (sha256 {sha256}). If the new file is trusted, update the data."
            )
        link(got.path, entry)
    return entry


def requirement_libraries(wheel: RequirementWheel, target: Sequence[str], cache_dir: Path, log: Path) -> Path:
    """A folder holding the libraries of ``wheel`` under their wheel member names (unpacked once, by sha256)."""
    base = cache_dir / "requirement-libraries" / wheel.sha256
    if (base / ".complete").is_file():
        return base / "root"
    archive = requirement_wheel(wheel, target, cache_dir, log)
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".root-", dir=base))
    try:
        wanted = set(wheel.libraries)
        with archives.open_zip(archive) as zipped:
            for info in zipped.infolist():
                if info.filename in wanted:
                    target_path = _safe_target(staging, info.filename, archive)
                    target_path.parent.mkdir(parents=True, exist_ok=True)
                    with zipped.open(info) as src, target_path.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        missing = sorted(wanted - {str(p.relative_to(staging).as_posix()) for p in staging.rglob("*") if p.is_file()})
        if missing:
            raise DependencyError(f"{archive.name} lacks {', '.join(missing)}, which {REQUIREMENTS_PINNED_IN} lists")
        shutil.rmtree(base / "root", ignore_errors=True)
        os.replace(staging, base / "root")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    (base / ".complete").write_text(wheel.file + "\n", encoding="utf-8")
    return base / "root"
