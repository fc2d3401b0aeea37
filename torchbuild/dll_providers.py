"""Where the DLLs a win-64 wheel vendors come from (torchbuild/data/dll_providers.yaml).

``required_dlls`` says which DLLs a cell must ship (the Plan's ``ship_dlls``). ``locate`` finds a file for each
of them that the wheel does not already hold:

- on Windows, in the provider's directories first (CUDA_PATH_Vx_y\\bin, the MKL/OpenMP directories, System32 for
  the VC runtime);
- anywhere (and on Windows when those lack it), in the provider's win_amd64 wheel from the package index,
  downloaded once with pip and unpacked into ``<cache-dir>/dll-providers/<wheel>/`` (its .dll files, flat).

Every located DLL must be an AMD64 PE file. A DLL that no provider has raises ``ProviderError`` naming the DLL, the
provider and every place looked in.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from torchbuild import datafiles, pe, pip
from torchbuild.compat import CPU, Rule

DATA_FILE = "dll_providers.yaml"
PIP_TIMEOUT_S = 1800
DONE = ".complete"  # written last into a provider's cache directory


class ProviderError(ValueError):
    """A DLL no provider could give; the message names the DLL and where it was looked for."""


@dataclass(frozen=True)
class Provider:
    name: str
    dlls: tuple[str, ...]  # glob patterns, case-insensitive
    windows: tuple[str, ...]  # directory templates with %VAR% and {cuda_major} ...
    wheel: str | None  # pip requirement template of its win_amd64 wheel
    why: str = ""

    def provides(self, dll: str) -> bool:
        return any(fnmatch.fnmatch(dll.lower(), p.lower()) for p in self.dlls)


@dataclass(frozen=True)
class ProviderData:
    ship: tuple[Rule, ...]  # value: ';'-joined patterns
    providers: tuple[Provider, ...]

    def provider_for(self, dll: str) -> Provider | None:
        return next((p for p in self.providers if p.provides(dll)), None)


def _parse(raw: dict[str, Any]) -> ProviderData:
    ship = tuple(Rule(value=";".join(str(d) for d in r["dlls"]), when=r.get("when") or {}) for r in raw["ship"])
    providers = tuple(
        Provider(
            name=str(p["name"]),
            dlls=tuple(str(d) for d in p["dlls"]),
            windows=tuple(str(d) for d in p.get("windows") or ()),
            wheel=str(p["wheel"]) if p.get("wheel") else None,
            why=str(p.get("why", "")).strip(),
        )
        for p in raw["providers"]
    )
    return ProviderData(ship=ship, providers=providers)


def load() -> ProviderData:
    return datafiles.table(DATA_FILE, _parse)


def _values(cuda: str, cudnn: int | None) -> dict[str, str]:
    values = {"cudnn": str(cudnn), "cuda": cuda, "cuda_major": "", "cuda_minor": ""}
    if cuda != CPU:
        major, minor = cuda.split(".")[:2]
        values.update(cuda_major=major, cuda_minor=minor)
    return values


def required_dlls(platform: str, torch: str, cuda: str, cudnn: int | None) -> tuple[str, ...]:
    """The DLL name patterns a cell's repaired wheel must contain (empty off Windows)."""
    values = _values(cuda, cudnn)
    patterns: list[str] = []
    for rule in load().ship:
        if rule.applies(platform, torch, cuda):
            patterns += [p.format(**values) for p in rule.value.split(";")]
    return tuple(dict.fromkeys(patterns))


# --- locating --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Located:
    pattern: str  # what the Plan asked for
    path: Path  # the DLL file
    provider: str
    origin: str  # "wheel <file>" or the Windows directory

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


def _find(directory: Path, pattern: str) -> Path | None:
    if not directory.is_dir():
        return None
    hits = sorted(p for p in directory.iterdir() if p.is_file() and fnmatch.fnmatch(p.name.lower(), pattern.lower()))
    return hits[-1] if hits else None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", text)


def provider_dir(requirement: str, python: str, cache_dir: Path, log: Path) -> Path:
    """The .dll files of the win_amd64 wheel pip picks for ``requirement``, unpacked flat into the cache.

    The cache entry is reused without asking pip again once it is complete."""
    entry = cache_dir / "dll-providers" / f"{_safe(requirement)}-py{python}"
    if (entry / DONE).is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="provider-", dir=entry.parent) as tmp:
        try:
            pip.download([requirement], Path(tmp), log=log, target=pip.target_args(python, None, ["win_amd64"]))
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
        (staged / DONE).write_text(wheels[0].name + "\n", encoding="utf-8")
        shutil.rmtree(entry, ignore_errors=True)
        staged.replace(entry)
    return entry


def provider_wheel_name(directory: Path) -> str:
    done = directory / DONE
    return done.read_text(encoding="utf-8").strip() if done.is_file() else directory.name


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
        looked: list[str] = []
        hit: Located | None = None
        if on_windows:
            for template in provider.windows:
                directory = expand_windows_dir(template, values, env)
                if directory is None:
                    looked.append(f"{template.format(**values)} (variable not set)")
                    continue
                looked.append(str(directory))
                found = _find(directory, pattern)
                if found is not None:
                    hit = Located(pattern, found, provider.name, str(directory))
                    break
        if hit is None and provider.wheel:
            requirement = provider.wheel.format(**values)
            directory = provider_dir(requirement, python, cache_dir, log)
            wheel_name = provider_wheel_name(directory)
            looked.append(f"{wheel_name} (pip: {requirement}), unpacked in {directory}")
            found = _find(directory, pattern)
            if found is not None:
                hit = Located(pattern, found, provider.name, f"wheel {wheel_name}")
        if hit is None:
            where = "; ".join(looked) or "nowhere: the provider has no Windows directory and no wheel"
            raise ProviderError(
                f"{pattern} is needed in the wheel but provider '{provider.name}' lacks it (looked in: {where})"
            )
        try:
            machine = pe.machine_of(hit.path)
        except pe.PeError as exc:
            raise ProviderError(f"{hit.path} (provider '{provider.name}', for {pattern}): {exc}") from None
        if machine != "AMD64":
            raise ProviderError(
                f"{hit.path} (provider '{provider.name}', for {pattern}) is a {machine} DLL; "
                "a win_amd64 wheel needs AMD64"
            )
        located.append(hit)
    return located
