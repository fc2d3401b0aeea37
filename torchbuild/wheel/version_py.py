"""A package's ``<name>/version.py`` as its build wrote it (torch's, torchvision's): ``__version__``, ``cuda`` and
``git_version``. The one reader of what a wheel says about its own build."""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from torchbuild.host import archives
from torchbuild.wheel.wheelfile import WheelError

# `name = 'value'`, `name: Optional[str] = 'value'`, `name = None` (torch 2.x annotates its fields)
_FIELD = re.compile(r"^(__version__|cuda|git_version)(?:\s*:\s*[^=\n]+)?\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|(None))",
                    re.MULTILINE)  # fmt: skip


@dataclass(frozen=True)
class VersionPy:
    version: str | None  # __version__
    cuda: str | None  # X.Y of a CUDA build; None: a CPU build, or not said (``says_cuda``)
    git_version: str | None  # the commit it was built from
    says_cuda: bool  # the file sets ``cuda`` at all


def read(path: Path, package: str = "torch") -> VersionPy:
    """What ``<package>/version.py`` in the wheel at ``path`` says; WheelError naming the file when it cannot be
    read."""
    try:
        with archives.open_zip(path, str(path)) as archive:
            text = archive.read(f"{package}/version.py").decode("utf-8", "replace")
    except (KeyError, OSError, zipfile.BadZipFile) as exc:
        raise WheelError(f"cannot read {package}/version.py of {path.name}: {exc}") from None
    fields = {name: quoted or double or None for name, quoted, double, _none in _FIELD.findall(text)}
    said = {name for name, *_ in _FIELD.findall(text)}
    return VersionPy(
        version=fields.get("__version__"),
        cuda=fields.get("cuda"),
        git_version=fields.get("git_version"),
        says_cuda="cuda" in said,
    )
