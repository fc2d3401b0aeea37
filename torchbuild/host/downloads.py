"""Downloads pinned by sha256 (a cell's build dependencies, config/build_deps.py; python.org's embeddable CPython):
downloaded with retries and a progress bar, verified, unpacked safely (no member may land outside its folder),
and cached by hash in ``<cache>/deps/<sha256>/``.

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
import urllib.error
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from torchbuild.config.build_deps import Dependency, DependencyError
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
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    from torchbuild.host.console import console

    dest.parent.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for attempt in range(1, retries + 1):
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
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
            for entry in seven.list():
                _safe_target(dest, entry.filename, archive)
                if entry.is_symlink:
                    raise DependencyError(f"{archive.name}: member {entry.filename!r} is a link; refused.")
            seven.extractall(path=dest)
    elif name.endswith((".zip", ".whl")):
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                _safe_target(dest, info.filename, archive)
            zipped.extractall(dest)
    else:
        with tarfile.open(archive) as tar:
            # The standard library's data filter (PEP 706) knows the rules: a hard link's target is relative to the
            # archive's root, a symlink's to its folder; devices, fifos and absolute names are refused. Every member
            # is checked first so that a bad one leaves nothing written.
            for member in tar.getmembers():
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
