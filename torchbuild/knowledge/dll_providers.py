"""The DLLs a win-64 wheel takes from redistributables, and where they come from (torchbuild/data/dll_providers.yaml).

What the repair vendors is derived (``needed``): the DLLs the wheel's PE files import that are nowhere else (the
import closure's gaps), plus what ``loaded_by_name`` says is loaded at run time, each checked against the names the
cell's redistributables have (``redistributable_dlls``, which ``plan`` shows). ``locate`` finds a file for each:

- on Windows, in the provider's directories first (CUDA_PATH_Vx_y\\bin, the MKL/OpenMP directories, System32 for
  the VC runtime);
- anywhere (and on Windows when those lack it), in the provider's win_amd64 wheel from the package index,
  downloaded once with pip and unpacked into ``<cache-dir>/dll-providers/<wheel>/`` (its .dll files, flat).

Every located DLL must be an AMD64 PE file. A DLL that no provider has raises ``ProviderError`` naming the DLL, the
provider and every place looked in. ``conda_provided`` says which conda package provides a DLL in an environment.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles, python_embed
from torchbuild.knowledge.compat import CPU
from torchbuild.knowledge.cuda_wheels import RequirementWheel

DATA_FILE = "dll_providers.yaml"


class ProviderError(ValueError):
    """A DLL no provider could give; the message names the DLL and where it was looked for."""


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Windows compares DLL names case-insensitively."""
    return any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns)


@dataclass(frozen=True)
class Provider:
    name: str
    dlls: tuple[str, ...]  # glob patterns, case-insensitive
    windows: tuple[str, ...]  # directory templates with %VAR% and {cuda_major} ...
    wheels: Mapping[str, str]  # pip requirement template of its win_amd64 wheel, by CUDA major ("*": any cell)
    python: str | None = None  # download the wheel for this Python (DLLs identical across its Python tags)
    signer: str = ""  # the organization whose Authenticode signature its DLLs must carry
    why: str = ""

    def provides(self, dll: str) -> bool:
        return matches(dll, self.dlls)

    def requirement(self, values: Mapping[str, str]) -> str | None:
        template = self.wheels.get(values["cuda_major"]) or self.wheels.get("*")
        return template.format(**values) if template else None


@dataclass(frozen=True)
class Redistributable:
    """One `redistributables` row: DLL names a cell's binaries may take, for the cells its conditions select."""

    dlls: tuple[str, ...]
    msvc: str | None = None  # specifier on the cell's MSVC toolset
    cuda: str | None = None  # specifier on the cell's CUDA version (never a CPU cell)
    cudnn: int | None = None

    def applies(self, msvc: str | None, cuda: str, cudnn: int | None) -> bool:
        if self.msvc is not None and (msvc is None or Version(msvc) not in SpecifierSet(self.msvc)):
            return False
        if self.cuda is not None and (cuda == CPU or Version(cuda) not in SpecifierSet(self.cuda)):
            return False
        return self.cudnn is None or self.cudnn == cudnn


@dataclass(frozen=True)
class LoadedByName:
    loader: str  # pattern of the DLL that loads
    loads: tuple[str, ...]  # patterns of what it loads with LoadLibrary
    cells: Redistributable  # the cells the row is for (its dlls unused)
    why: str = ""


@dataclass(frozen=True)
class Unsigned:
    cells: Redistributable  # the cells the row is for, and (as dlls) the DLL patterns
    why: str


@dataclass(frozen=True)
class CondaProvides:
    package: str
    dlls: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class SystemDlls:
    """What a wheel may import without shipping it, beyond delvewheel's list of Windows' own DLLs (which
    torchbuild/platforms/windows/pe.py adds): the data's extra names and patterns, the Python's, the driver's, and the
    package directories on the DLL search path."""

    extra: tuple[str, ...] = ()  # lower-case names
    extra_patterns: tuple[str, ...] = ()  # regular expressions
    python: tuple[str, ...] = ()  # with {py}
    driver: tuple[str, ...] = ()  # lower-case names
    search_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProviderData:
    providers: tuple[Provider, ...]
    redistributables: tuple[Redistributable, ...] = ()
    loaded_by_name: tuple[LoadedByName, ...] = ()
    conda_packages: tuple[CondaProvides, ...] = ()
    unsigned: tuple[Unsigned, ...] = ()
    system: SystemDlls = SystemDlls()

    def provider_for(self, dll: str) -> Provider | None:
        return next((p for p in self.providers if p.provides(dll)), None)

    def why_unsigned(self, dll: str, cuda: str) -> str | None:
        """Why ``dll`` may come without a signature for a cell of ``cuda``; None when it must be signed."""
        return next(
            (u.why for u in self.unsigned if u.cells.applies(None, cuda, None) and matches(dll, u.cells.dlls)), None
        )


def _strings(raw: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in raw or ())


def _parse(raw: dict[str, Any]) -> ProviderData:
    return ProviderData(
        providers=tuple(
            Provider(
                name=str(p["name"]),
                dlls=_strings(p["dlls"]),
                windows=_strings(p.get("windows")),
                wheels={str(k): str(v) for k, v in (p.get("wheels") or {}).items()}
                | ({"*": str(p["wheel"])} if p.get("wheel") else {}),
                python=str(p["python"]) if p.get("python") else None,
                signer=str(p.get("signer", "")),
                why=str(p.get("why", "")).strip(),
            )
            for p in raw["providers"]
        ),
        redistributables=tuple(
            Redistributable(
                dlls=_strings(r["dlls"]),
                msvc=str(r["msvc"]) if "msvc" in r else None,
                cuda=str(r["cuda"]) if "cuda" in r else None,
                cudnn=int(r["cudnn"]) if "cudnn" in r else None,
            )
            for r in raw["redistributables"]
        ),
        loaded_by_name=tuple(
            LoadedByName(
                loader=str(r["loader"]),
                loads=_strings(r["loads"]),
                cells=Redistributable(
                    dlls=(),
                    cuda=str(r["cuda"]) if "cuda" in r else None,
                    cudnn=int(r["cudnn"]) if "cudnn" in r else None,
                ),
                why=str(r.get("why", "")),
            )
            for r in raw["loaded_by_name"]
        ),
        conda_packages=tuple(
            CondaProvides(package=str(r["package"]), dlls=_strings(r["dlls"]), why=str(r.get("why", "")))
            for r in raw["conda_packages"]
        ),
        unsigned=tuple(
            Unsigned(
                cells=Redistributable(dlls=_strings(r["dlls"]), cuda=str(r["cuda"]) if "cuda" in r else None),
                why=" ".join(str(r["why"]).split()),
            )
            for r in raw.get("unsigned") or ()
        ),
        system=SystemDlls(
            extra=tuple(str(row["name"]).lower() for row in raw["system_extra"]),
            extra_patterns=tuple(str(row["pattern"]) for row in raw["system_patterns_extra"]),
            python=_strings(raw["python"]),
            driver=tuple(str(n).lower() for n in raw["driver"]),
            search_dirs=_strings(raw["search_dirs"]),
        ),
    )


def load() -> ProviderData:
    return datafiles.table(DATA_FILE, _parse)


def values_for(cuda: str, cudnn: int | None) -> dict[str, str]:
    values = {"cudnn": str(cudnn), "cuda": cuda, "cuda_major": "", "cuda_minor": "", "cuda_nodot": ""}
    if cuda != CPU:
        major, minor = cuda.split(".")[:2]
        values.update(cuda_major=major, cuda_minor=minor, cuda_nodot=f"{major}{minor}")
    return values


# --- what a cell may ship, and what it must --------------------------------------------------------------


def redistributable_dlls(platform: str, msvc: str | None, cuda: str, cudnn: int | None) -> tuple[str, ...]:
    """The DLL name patterns a cell's binaries may take from redistributables (empty off Windows)."""
    if platform != "win-64":
        return ()
    rows = load().redistributables
    if cuda != CPU and not any(r.cuda is not None and r.applies(None, cuda, None) for r in rows):
        known = ", ".join(str(r.cuda) for r in rows if r.cuda is not None)
        raise UserError(
            f"{DATA_FILE} has no CUDA DLL names for CUDA {cuda}: it knows CUDA {known}. Add a `redistributables` "
            "row for it (from NVIDIA's wheels or installer) before building this cell."
        )
    values = values_for(cuda, cudnn)
    found = [d.format(**values) for r in rows if r.applies(msvc, cuda, cudnn) for d in r.dlls]
    return tuple(dict.fromkeys(found))


def loaded_by_name(platform: str, cuda: str, cudnn: int | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(loader, what it loads) for a cell, placeholders filled in (empty off Windows)."""
    if platform != "win-64":
        return ()
    values = values_for(cuda, cudnn)
    return tuple(
        (rule.loader.format(**values), tuple(p.format(**values) for p in rule.loads))
        for rule in load().loaded_by_name
        if rule.cells.applies(None, cuda, cudnn)
    )


def conda_provided(depends: Iterable[str], vendored: Sequence[RequirementWheel] = ()) -> dict[str, str]:
    """DLL pattern -> the run dependency (a conda package name) that installs it into the environment, less the DLLs
    of the declared requirements the cell vendors: a vendored MKL in torch.libs loads libiomp5md.dll by name, which
    only the copy torch preloads from torch\\lib answers (the dependency's, in Library\\bin, is on no search path a
    bare LoadLibrary uses outside an activated environment; smoke-conda found it)."""
    names = {spec.split()[0] for spec in depends}
    kept = [name for wheel in vendored for name in wheel.library_names]
    provided = {dll: row.package for row in load().conda_packages if row.package in names for dll in row.dlls}
    return {pattern: package for pattern, package in provided.items() if not matches_any(pattern, kept)}


def provided_members(members: Iterable[str], provided: Mapping[str, str]) -> dict[str, str]:
    """Wheel members (DLLs) that a run dependency provides in a conda environment -> that dependency."""
    found: dict[str, str] = {}
    for member in members:
        name = PurePosixPath(member).name
        if name.lower().endswith(".dll"):
            package = next((pkg for pattern, pkg in provided.items() if matches(name, [pattern])), None)
            if package is not None:
                found[member] = package
    return found


def runtime_loaded(present: Iterable[str], rules: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """What ``rules`` say must ship because a DLL of ``present`` (names) loads it by name, to a fixed point."""
    have = list(dict.fromkeys(present))
    added: list[str] = []
    changed = True
    while changed:
        changed = False
        for loader, loads in rules:
            if not any(fnmatch.fnmatch(name.lower(), loader.lower()) for name in have):
                continue
            for pattern in loads:
                if not matches_any(pattern, have) and pattern not in added:
                    added.append(pattern)
                    have.append(pattern)
                    changed = True
    return added


def matches_any(pattern: str, names: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name.lower(), pattern.lower()) for name in names)


def windows_facts(platform: str, cuda: str, python: str) -> dict[str, Any]:
    """The Plan's win-64 fields (none elsewhere): DLL providers, the DLL search path, the driver's DLLs, the
    embeddable CPython of ``python``."""
    if platform != "win-64":
        return {}
    data = load()
    unsigned = tuple(u for u in data.unsigned if u.cells.applies(None, cuda, None))
    try:
        embeddable, missing = python_embed.pinned_for(python), ""
    except python_embed.NotPinned as exc:
        embeddable, missing = None, exc.short
    return {
        "dll_providers": ProviderData(providers=data.providers, unsigned=unsigned),
        "dll_search_dirs": data.system.search_dirs,
        "driver_dlls": data.system.driver,
        "embeddable": embeddable,
        "embeddable_missing": missing,
    }
