"""A wheel's dependencies for a Windows target, found from Linux, and wheels installed into a Windows environment.

pip evaluates environment markers against the host even with ``--platform``: on Linux, torch's Requires-Dist would
bring the nvidia-* and triton wheels and leave out what only Windows needs. ``resolve`` asks uv's resolver for the
target instead (``uv pip compile --python-platform x86_64-pc-windows-msvc --python-version <the exact CPython>``,
host/uv.py): it evaluates every marker for Windows, backtracks where a later requirement asks for less, and chooses
the win_amd64 (or pure Python) wheel of each project; pip fetches those files into a cache folder (host/pip.py).

``install`` installs a wheel the way pip does on Windows (the nt scheme: purelib and platlib into
``Lib\\site-packages``, .data/scripts and the ``.exe`` launchers into ``Scripts``, .data/data into the prefix) with
installer (wheel/install.py), without byte-compiling with the host's Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchbuild.errors import UserError
from torchbuild.host import pip, uv
from torchbuild.wheel import wheelfile

PLATFORM = "win_amd64"


class DependencyError(UserError):
    pass


@dataclass(frozen=True)
class Resolved:
    name: str  # canonical
    wheel: Path
    version: str


def metadata_requires(wheel: Path) -> list[str]:
    try:
        metadata = wheelfile.read_metadata(wheel)
    except wheelfile.WheelError as exc:
        raise DependencyError(f"cannot read {wheel}: {exc}") from None
    return [str(line) for line in metadata.get_all("Requires-Dist") or []]


def applicable(lines: Sequence[str], markers: Mapping[str, str], extras: Sequence[str] = ()) -> list[Requirement]:
    """The requirements of ``lines`` whose markers hold on the target (with the extras asked for)."""
    found = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise DependencyError(f"invalid requirement {line!r}: {exc}") from None
        marker = requirement.marker
        if marker is None or any(marker.evaluate({**markers, "extra": e}) for e in ("", *extras)):
            found.append(requirement)
    return found


def resolve(
    roots: Sequence[tuple[str, str]],
    *,
    python: str,
    dest: Path,
    log: Path,
    skip: Sequence[str] = (),
) -> list[Resolved]:
    """The win_amd64 wheels of ``roots`` ((requirement, who asks)) and everything they require on the target
    Python ``python`` (X.Y.Z: markers such as ``python_full_version`` hold as they will), downloaded into ``dest``
    (files already there are reused). ``skip``: projects not to install (the artifact itself)."""
    requirements = [line for line, _ in roots]
    target = uv.Target(python=python, platform=uv.python_platform(PLATFORM))
    try:
        chosen = uv.lock(requirements, target, log=log, deps=True)
    except uv.UvError as exc:
        wanted = "; ".join(f"{line} (asked by {who})" for line, who in roots)
        message = f"no {PLATFORM} wheels for Python {python} of {wanted}: {exc.detail} (log: {log})"
        raise DependencyError(message) from None
    skipped = {canonicalize_name(name) for name in skip}
    chosen = [wheel for wheel in chosen if canonicalize_name(wheel.name) not in skipped]
    try:
        fetched = pip.fetch(chosen, dest, log=log, target=pip.target_args(python, None, [PLATFORM]))
    except pip.PipError as exc:
        raise DependencyError(f"fetching the {PLATFORM} wheels for Python {python}: {exc}") from None
    return [
        Resolved(name=canonicalize_name(wheel.name), wheel=got.path, version=wheel.version)
        for wheel, got in sorted(zip(chosen, fetched, strict=True), key=lambda pair: canonicalize_name(pair[0].name))
    ]


def install(wheel: Path, prefix: Path, scheme: Mapping[str, str]) -> int:
    """Install ``wheel`` into the Windows environment at ``prefix`` (``scheme``: the nt install scheme of the Plan,
    relative to the prefix), as pip would. Returns the number of files. A member escaping the prefix refuses the
    whole wheel before anything is written."""
    from torchbuild.wheel.install import install_wheel  # loads installer

    try:
        return install_wheel(wheel, scheme, prefix, windows=True, installer_name="pip", overwrite=True).files
    except UserError as exc:
        raise DependencyError(str(exc)) from None
