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
import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchbuild import datafiles, pe, pip
from torchbuild.compat import CPU
from torchbuild.errors import UserError

DATA_FILE = "dll_providers.yaml"
PIP_TIMEOUT_S = 1800
DONE = ".complete"  # written last into a provider's cache directory: the wheel it came from (JSON)


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
class CondaProvides:
    package: str
    dlls: tuple[str, ...]
    why: str = ""


@dataclass(frozen=True)
class ProviderData:
    providers: tuple[Provider, ...]
    redistributables: tuple[Redistributable, ...] = ()
    loaded_by_name: tuple[LoadedByName, ...] = ()
    conda_packages: tuple[CondaProvides, ...] = ()

    def provider_for(self, dll: str) -> Provider | None:
        return next((p for p in self.providers if p.provides(dll)), None)


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
    )


def load() -> ProviderData:
    return datafiles.table(DATA_FILE, _parse)


def _values(cuda: str, cudnn: int | None) -> dict[str, str]:
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
    values = _values(cuda, cudnn)
    found = [d.format(**values) for r in rows if r.applies(msvc, cuda, cudnn) for d in r.dlls]
    return tuple(dict.fromkeys(found))


def loaded_by_name(platform: str, cuda: str, cudnn: int | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(loader, what it loads) for a cell, placeholders filled in (empty off Windows)."""
    if platform != "win-64":
        return ()
    values = _values(cuda, cudnn)
    return tuple(
        (rule.loader.format(**values), tuple(p.format(**values) for p in rule.loads))
        for rule in load().loaded_by_name
        if rule.cells.applies(None, cuda, cudnn)
    )


def conda_provided(depends: Iterable[str]) -> dict[str, str]:
    """DLL pattern -> the run dependency (a conda package name) that installs it into the environment."""
    names = {spec.split()[0] for spec in depends}
    return {dll: row.package for row in load().conda_packages if row.package in names for dll in row.dlls}


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


# --- locating --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderWheel:
    """The provider wheel a DLL came from: what an SBOM names."""

    filename: str
    name: str  # distribution name, as in its METADATA
    version: str
    sha256: str
    url: str  # where pip found it
    license: str  # License-Expression, else License, else the license classifiers, as the wheel says

    def to_dict(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("filename", "name", "version", "sha256", "url", "license")}


@dataclass(frozen=True)
class Located:
    pattern: str  # what was asked for
    path: Path  # the DLL file
    provider: str
    origin: str  # "wheel <file>" or the Windows directory
    wheel: ProviderWheel | None = None  # the provider wheel, when it came from one

    @property
    def name(self) -> str:
        return self.path.name


_VAR = re.compile(r"%([^%]+)%")


def expand_windows_dir(template: str, values: Mapping[str, str], env: Mapping[str, str]) -> Path | None:
    """A provider directory with {placeholders} and %VARIABLES% filled in; None when a variable is not set."""
    text = template.format(**values)
    missing = [v for v in _VAR.findall(text) if not env.get(v)]
    if missing:
        return None
    # Windows takes '/' as well as '\\'; with '/' the same path is also usable in tests off Windows.
    return Path(_VAR.sub(lambda m: env[m.group(1)], text).replace("\\", "/"))


def _find(directory: Path, pattern: str) -> list[Path]:
    """The files of ``directory`` a name pattern asks for: every match of a glob (cuDNN's sub-libraries), the one
    file of a plain name."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and fnmatch.fnmatch(p.name.lower(), pattern.lower()))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text)


def _license(metadata: Any) -> str:
    expression = metadata.get("License-Expression") or metadata.get("License") or ""
    if expression and "\n" not in str(expression):
        return str(expression)
    classifiers = [str(c).split(" :: ")[-1] for c in metadata.get_all("Classifier") or () if "License ::" in str(c)]
    return "; ".join(classifiers) or (str(expression).splitlines()[0] if expression else "")


def _describe_wheel(path: Path, url: str) -> ProviderWheel:
    from email.parser import Parser

    from torchbuild.results import sha256_of

    with zipfile.ZipFile(path) as archive:
        meta_name = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(meta_name).decode("utf-8", "replace"))
    return ProviderWheel(
        filename=path.name,
        name=str(metadata.get("Name", "")),
        version=str(metadata.get("Version", "")),
        sha256=sha256_of(path),
        url=url,
        license=_license(metadata),
    )


def provider_dir(requirement: str, python: str, cache_dir: Path, log: Path) -> Path:
    """The .dll files of the win_amd64 wheel pip picks for ``requirement``, unpacked flat into the cache, with what
    the wheel was (``DONE``, JSON). The cache entry is reused without asking pip again once it is complete."""
    entry = cache_dir / "dll-providers" / f"{_safe(requirement)}-py{python}"
    if (entry / DONE).is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="provider-", dir=entry.parent) as tmp:
        try:
            target = pip.target_args(python, None, ["win_amd64"])
            fetched = pip.download([requirement], Path(tmp), log=log, target=target)
        except pip.PipError as exc:
            raise ProviderError(
                f"pip finds no win_amd64 wheel {requirement} for Python {python} ({exc.detail}); log: {log}"
            ) from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise ProviderError(f"pip download {requirement} left {len(wheels)} wheels, not 1; log: {log}")
        staged = Path(tmp) / "dlls"
        staged.mkdir()
        with zipfile.ZipFile(wheels[0]) as archive:
            for member in archive.infolist():
                name = PurePosixPath(member.filename).name
                if name.lower().endswith(".dll") and not (staged / name).exists():
                    with archive.open(member) as src, (staged / name).open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        described = _describe_wheel(wheels[0], fetched[-1].url.split("#", 1)[0])
        (staged / DONE).write_text(json.dumps(described.to_dict(), indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(entry, ignore_errors=True)
        staged.replace(entry)
    return entry


def provider_wheel(directory: Path) -> ProviderWheel | None:
    try:
        raw = json.loads((directory / DONE).read_text(encoding="utf-8"))
        return ProviderWheel(**{k: str(raw[k]) for k in ("filename", "name", "version", "sha256", "url", "license")})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # an entry of an older torchbuild (a plain file name): it is made again below


def locate(
    patterns: Sequence[str],
    *,
    cuda: str,
    cudnn: int | None,
    python: str,
    cache_dir: Path,
    log: Path,
    on_windows: bool = os.name == "nt",
    env: Mapping[str, str] = os.environ,
    data: ProviderData | None = None,
) -> list[Located]:
    """A file for each DLL pattern, from its provider. Raises ProviderError naming the DLL and where it looked."""
    data = data or load()
    values = _values(cuda, cudnn)
    located: list[Located] = []
    for pattern in patterns:
        provider = data.provider_for(pattern)
        if provider is None:
            names = ", ".join(p.name for p in data.providers)
            raise ProviderError(f"no DLL provider in {DATA_FILE} gives {pattern} (providers: {names})")
        hits, looked = _from_windows(provider, pattern, values, env) if on_windows else ([], [])
        requirement = provider.requirement(values)
        if not hits and requirement:
            directory = provider_dir(requirement, provider.python or python, cache_dir, log)
            wheel = provider_wheel(directory)
            if wheel is None:  # a cache entry without its record: make it again
                shutil.rmtree(directory, ignore_errors=True)
                directory = provider_dir(requirement, provider.python or python, cache_dir, log)
                wheel = provider_wheel(directory)
            filename = wheel.filename if wheel else directory.name
            looked.append(f"{filename} (pip: {requirement}), unpacked in {directory}")
            origin = f"wheel {filename}"
            hits = [Located(pattern, path, provider.name, origin, wheel) for path in _find(directory, pattern)]
        if not hits:
            where = "; ".join(looked) or "nowhere: the provider has no Windows directory and no wheel for this cell"
            raise ProviderError(
                f"{pattern} is needed in the wheel but provider '{provider.name}' lacks it (looked in: {where})"
            )
        for hit in hits:
            _check_machine(hit, provider, pattern)
            if all(hit.path != other.path for other in located):
                located.append(hit)
    return located


def _from_windows(
    provider: Provider, pattern: str, values: Mapping[str, str], env: Mapping[str, str]
) -> tuple[list[Located], list[str]]:
    looked: list[str] = []
    for template in provider.windows:
        directory = expand_windows_dir(template, values, env)
        if directory is None:
            looked.append(f"{template.format(**values)} (variable not set)")
            continue
        looked.append(str(directory))
        found = _find(directory, pattern)
        if found:
            return [Located(pattern, path, provider.name, str(directory)) for path in found], looked
    return [], looked


def _check_machine(hit: Located, provider: Provider, pattern: str) -> None:
    try:
        machine = pe.machine_of(hit.path)
    except pe.PeError as exc:
        raise ProviderError(f"{hit.path} (provider '{provider.name}', for {pattern}): {exc}") from None
    if machine != "AMD64":
        raise ProviderError(
            f"{hit.path} (provider '{provider.name}', for {pattern}) is a {machine} DLL; a win_amd64 wheel needs AMD64"
        )
