"""How long an installed path may be on Windows, and the install roots users typically have.

Windows' MAX_PATH is 260 characters including the terminating NUL: 259 for the path. Python on Windows without the
LongPathsEnabled policy (the default) fails beyond it with WinError 206 or "No such file or directory", in pip and
in conda alike. A wheel member ends up at ``<install root>\\<member>``, so the longest member decides how long a root
may be. The roots below are what typical users have, with a 20-character user name (as
torchbuild/conda/checks/content.py assumes for conda, TB102); they are estimates, not measurements, and a longer user
name or project path moves each by as much.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

WIN_MAX_PATH = 260  # characters, the terminating NUL included
WIN_PATH_LIMIT = WIN_MAX_PATH - 1
USER = "u" * 20
WIN_USER_HOME = f"C:\\Users\\{USER}\\"
CONDA_ROOT = WIN_USER_HOME + "miniconda3\\"  # Miniconda's default: the user's home
CONDA_ENV = CONDA_ROOT + "envs\\" + "e" * 16 + "\\"  # a 16-character environment name


@dataclass(frozen=True)
class InstallRoot:
    name: str
    template: str  # {py}: 312; {python}: 3.12; {dist}: the conda package's name-version-build
    enforced: bool = True  # a root where pip installs the wheel; the others are shown, not enforced
    why: str = ""

    def path(self, python: str, dist: str) -> str:
        return self.template.format(py=python.replace(".", ""), python=python, dist=dist)


ROOTS = (
    InstallRoot("a venv", WIN_USER_HOME + "p" * 16 + "\\.venv\\Lib\\site-packages\\"),
    InstallRoot(
        "python.org's installer (per user)",
        WIN_USER_HOME + "AppData\\Local\\Programs\\Python\\Python{py}\\Lib\\site-packages\\",
    ),
    # python.org's embeddable zip, unpacked where a browser saves it; a two-digit patch release
    InstallRoot(
        "the embeddable CPython", WIN_USER_HOME + "Downloads\\python-{python}.10-embed-amd64\\Lib\\site-packages\\"
    ),
    InstallRoot("a conda environment", CONDA_ENV + "Lib\\site-packages\\"),
    InstallRoot(
        "conda's package cache",
        CONDA_ROOT + "pkgs\\{dist}\\Lib\\site-packages\\",
        enforced=False,
        why="not enforced: the conda package's own paths go there, which TB102 checks; it keeps licenses in info\\",
    ),
)


@dataclass(frozen=True)
class Budget:
    longest: str  # the longest member
    roots: tuple[tuple[InstallRoot, str], ...]  # each root with its path for this wheel

    @property
    def room(self) -> int:
        """The longest install root the longest member still fits under."""
        return WIN_PATH_LIMIT - len(self.longest.replace("/", "\\"))

    def fits(self, root: str) -> bool:
        return len(root) <= self.room

    def too_long(self) -> list[tuple[InstallRoot, str]]:
        return [(root, path) for root, path in self.roots if root.enforced and not self.fits(path)]

    def line(self) -> str:
        """The budget in one line: the longest member, the room it leaves, each typical root's length."""

        def shown(root: InstallRoot, path: str) -> str:
            verdict = "fits" if self.fits(path) else "does not fit"
            return f"{root.name} {len(path)} {verdict}" + ("" if root.enforced else f" ({root.why})")

        return (
            f"longest member {len(self.longest)} characters ({self.longest}): fits an install root of up to "
            f"{self.room} characters (MAX_PATH {WIN_PATH_LIMIT}); "
            + ", ".join(shown(root, path) for root, path in self.roots)
        )


def budget(members: list[str], python: str, dist: str) -> Budget:
    """The budget of a wheel with ``members`` for a Python X.Y; ``dist``: its conda package's name-version-build."""
    longest = max(members, key=len, default="")
    return Budget(longest, tuple((root, root.path(python, dist)) for root in ROOTS))


def _room_under_enforced_roots(python: str) -> int:
    """The longest member that fits under every root pip installs into, for Python X.Y."""
    return WIN_PATH_LIMIT - max(len(root.path(python, "")) for root in ROOTS if root.enforced)


def license_renames(wheel_name: str, members: list[str], python: str) -> dict[str, str]:
    """Shorter names for a Windows wheel's dist-info license files that would not fit MAX_PATH under the roots pip
    installs into (empty for any other wheel). PEP 639 keeps them under ``<dist-info>/licenses/`` with their
    source-tree paths, which an own build's longer version (``torch-2.13.0a0+git1eba9b3.dist-info``, 11 characters
    more than the release's) pushes past it. A renamed file keeps its name and its folder; the folders between become
    8 hex digits of a hash of the whole path, so that two license files never meet."""
    if "-win" not in wheel_name:
        return {}
    room = _room_under_enforced_roots(python)
    renames = {}
    for member in members:
        head, found, relative = member.partition(".dist-info/licenses/")
        if not found or len(member.replace("/", "\\")) <= room:
            continue
        parts = relative.split("/")
        digest = hashlib.sha256(relative.encode("utf-8")).hexdigest()[:8]
        shorter = f"{head}.dist-info/licenses/{'/'.join([*parts[:1], digest, *parts[-2:]])}"
        if len(parts) <= 3 or len(shorter) > room:
            shorter = f"{head}.dist-info/licenses/{digest}/{parts[-1]}"
        renames[member] = shorter
    return renames


def with_license_files_renamed(metadata: bytes, renames: dict[str, str]) -> bytes:
    """METADATA with each ``License-File`` field that names a renamed file (relative to the licenses folder) naming
    its new path; every other byte kept."""
    relative = {
        old.partition(".dist-info/licenses/")[2]: new.partition(".dist-info/licenses/")[2]
        for old, new in renames.items()
    }
    lines = metadata.decode("utf-8").splitlines(keepends=True)
    for index, line in enumerate(lines):
        field, colon, value = line.partition(":")
        if colon and field.strip().lower() == "license-file" and value.strip() in relative:
            ending = line[len(line.rstrip("\r\n")) :]
            lines[index] = f"{field}: {relative[value.strip()]}{ending}"
    return "".join(lines).encode("utf-8")
