"""A wheel's dependencies for a Windows target, found from Linux, and wheels unpacked into a Windows environment.

pip evaluates environment markers against the host even with ``--platform``: on Linux, torch's Requires-Dist would
bring the nvidia-* and triton wheels and leave out what only Windows needs. So ``resolve`` evaluates every
Requires-Dist against the target's marker values (the Plan's ``conda.marker_environment``, with the exact CPython
release) and asks pip only to download, ``--no-deps``, the win_amd64 (or pure Python) wheel of each requirement for
the target Python, level by level, narrowing a requirement when a later wheel asks for less than what was taken.

``unpack`` installs a wheel the way pip does on Windows (the nt scheme: purelib and platlib into
``Lib\\site-packages``, .data/scripts into ``Scripts``, .data/data into the prefix), without byte-compiling with the
host's Python.
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from torchbuild.errors import UserError
from torchbuild.host import pip
from torchbuild.wheel import wheelfile

MAX_ROUNDS = 12


class DependencyError(UserError):
    pass


@dataclass(frozen=True)
class Resolved:
    name: str  # canonical
    wheel: Path
    version: str
    asked: tuple[str, ...]  # the requirements that led to it, e.g. "sympy>=1.13.3 (torch)"


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


def _name_of(wheel: Path) -> tuple[str, str]:
    try:
        name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise DependencyError(f"pip downloaded {wheel.name}, which is not a wheel: {exc}") from None
    return str(name), str(version)


def _spec(name: str, asked: Sequence[Requirement]) -> str:
    specifiers = sorted({str(s) for r in asked for s in r.specifier})
    extras = sorted({e for r in asked for e in r.extras})
    return name + (f"[{','.join(extras)}]" if extras else "") + ",".join(specifiers)


def resolve(
    roots: Sequence[tuple[str, str]],
    *,
    python: str,
    markers: Mapping[str, str],
    dest: Path,
    log: Path,
    skip: Sequence[str] = (),
) -> list[Resolved]:
    """The win_amd64 wheels of ``roots`` ((requirement, who asks)) and everything they require on the target,
    downloaded into ``dest`` (files already there are reused). ``skip``: names not to fetch (the artifact itself)."""
    target = pip.target_args(python, None, ["win_amd64"])
    skipped = {canonicalize_name(n) for n in skip}
    asked: dict[str, list[tuple[Requirement, str]]] = {}
    chosen: dict[str, tuple[Path, str]] = {}

    def add(requirement: Requirement, by: str) -> None:
        name = canonicalize_name(requirement.name)
        if name not in skipped:
            asked.setdefault(name, []).append((requirement, by))

    for line, by in roots:
        add(Requirement(line), by)
    for _round in range(MAX_ROUNDS):
        todo = [
            name
            for name, reqs in asked.items()
            if name not in chosen or not all(r.specifier.contains(chosen[name][1], prereleases=True) for r, _ in reqs)
        ]
        if not todo:
            break
        specs = {name: _spec(name, [r for r, _ in asked[name]]) for name in todo}
        try:
            fetched = pip.download(list(specs.values()), dest, log=log, target=target)
        except pip.PipError as exc:
            wanted = "; ".join(f"{specs[n]} (asked by {', '.join(sorted({b for _, b in asked[n]}))})" for n in todo)
            raise DependencyError(
                f"no win_amd64 wheels for Python {python} of {wanted}: {exc.detail} (log: {log})"
            ) from None
        for item in fetched:
            name, version = _name_of(item.path)
            key = canonicalize_name(name)
            chosen[key] = (item.path, version)
            extras = sorted({e for r, _ in asked.get(key, []) for e in r.extras})
            for requirement in applicable(metadata_requires(item.path), markers, extras):
                add(requirement, f"{name} {version}")
    else:
        raise DependencyError(f"the requirements did not settle after {MAX_ROUNDS} rounds: {sorted(asked)}")
    missing = sorted(set(asked) - set(chosen))
    if missing:
        raise DependencyError(f"pip's log names no wheel for {', '.join(missing)} (log: {log})")
    return [
        Resolved(
            name=name,
            wheel=chosen[name][0],
            version=chosen[name][1],
            asked=tuple(sorted({f"{r} ({by})" for r, by in asked[name]})),
        )
        for name in sorted(chosen)
    ]


def unpack(wheel: Path, prefix: Path, scheme: Mapping[str, str]) -> int:
    """Install ``wheel`` into the Windows environment at ``prefix`` (``scheme``: the nt install scheme of the Plan,
    relative to the prefix). Returns the number of files. A member escaping the prefix refuses the whole wheel."""
    name = _name_of(wheel)[0]
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        data_dir = next(
            (p.split("/")[0] for m in members if (p := m.filename).split("/")[0].endswith(".data")), None
        )
        targets: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
        for member in members:
            parts = PurePosixPath(member.filename).parts
            if ".." in parts or member.filename.startswith("/"):
                raise DependencyError(f"{wheel.name}: member {member.filename!r} escapes the environment; refused")
            if data_dir is not None and parts[0] == data_dir and len(parts) > 2:
                key = parts[1]
                if key not in scheme:
                    raise DependencyError(f"{wheel.name}: {member.filename} is in an unknown .data/{key}/")
                base = scheme[key].replace("{dist}", name)
                targets.append((member, PurePosixPath(base, *parts[2:])))
            else:
                targets.append((member, PurePosixPath(scheme["platlib"], *parts)))
        for member, rel in targets:
            target = prefix.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    return len(targets)
