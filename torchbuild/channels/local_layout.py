"""What makes a local directory a channel, and what in it a killed writer may have left.

A directory is a channel when it holds the marker a publish or an index writes (``.torchbuild-channel``), or the
layout every torchbuild channel has had (``noarch/repodata.json``, ``whl/simple/index.html``), or nothing but names a
channel owns (conda subdirs, ``whl``, ``label`` (nightlies), the lock, staging folders: a channel whose first publish
was killed). A
missing or empty directory is a new channel. Anything else (a home folder typed by mistake) is refused before
anything is written into it, so that cleanup never runs where the pipeline did not write.

Cleanup removes only names this pipeline makes: staging folders at the channel's top, and files of host/files.py's
temporary form (``.<name>.<12 hex digits>.part``) in the folders a channel has (its top, its conda subdirs, its PEP
503 pages; the nightlies' as well).
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

from torchbuild.channels import nightly
from torchbuild.channels.admission import conda_subdirs
from torchbuild.errors import UserError

LOCK = ".torchbuild.lock"
MARKER = ".torchbuild-channel"
MARKER_TEXT = "a torchbuild channel: conda subdirs indexed by py-rattler, wheels under whl/simple (PEP 503)\n"
STAGING = ".staging-"  # the folder below the channel where an index is made before it is renamed into place
LAYOUT = ("noarch/repodata.json", "whl/simple/index.html")  # what every channel an earlier torchbuild wrote has
_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{12}\.part$")  # host/files.temporary_name's form


def is_owned_temporary(path: Path) -> bool:
    """A file written under host/files.py's temporary name (left behind only by a writer that was killed)."""
    return _TEMPORARY.match(path.name) is not None and path.is_file() and not path.is_symlink()


def _owned_name(entry: Path) -> bool:
    """A name a channel's top folder may hold before its first publish finished."""
    if entry.name in (LOCK, MARKER) or is_owned_temporary(entry):
        return True
    return entry.is_dir() and (entry.name.startswith(STAGING) or entry.name in ("whl", "label", *conda_subdirs()))


def check_channel(path: Path) -> None:
    """``path`` is a channel, or a missing or empty directory (a new one); UserError naming what else is there."""
    if path.exists() and not path.is_dir():
        raise UserError(f"channel {path} is not a directory: give a directory (it is made if missing).")
    if not path.is_dir() or (path / MARKER).is_file() or any((path / part).is_file() for part in LAYOUT):
        return
    try:
        foreign = sorted(entry.name for entry in path.iterdir() if not _owned_name(entry))
    except OSError as exc:
        raise UserError(f"channel {path} cannot be read: {exc.strerror or exc}") from None
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(
            f"{path} is not a channel (no {MARKER}, no noarch/repodata.json) and holds other files ({shown}); "
            "nothing was written. Give a channel directory, or a new or empty one (e.g. --channel channel)."
        )


def remove_leftovers(channel: Path) -> None:
    """What a killed writer of ``channel`` left: its staging folders and its temporary files. Only called under the
    channel's lock (nothing else can be using them) and after ``check_channel``."""
    for entry in channel.iterdir():
        if entry.name.startswith(STAGING) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
    folders: list[Path] = [channel]
    for simple in (channel / nightly.RELEASE_SIMPLE, channel / nightly.NIGHTLY_SIMPLE):
        folders += [simple, *(p for p in simple.iterdir() if p.is_dir())] if simple.is_dir() else []
    # The subdirs' folders: conda_subdirs() (py-rattler, 50 ms to import) is asked only of a folder with a leftover.
    subdirs: list[Path] = []
    for root in (channel, channel / nightly.CONDA_ROOT):
        with contextlib.suppress(OSError):
            subdirs += [entry for entry in root.iterdir() if entry.is_dir()]
    for folder in folders + subdirs:
        with contextlib.suppress(OSError):
            for entry in folder.iterdir():
                if is_owned_temporary(entry) and (folder not in subdirs or folder.name in conda_subdirs()):
                    entry.unlink(missing_ok=True)
