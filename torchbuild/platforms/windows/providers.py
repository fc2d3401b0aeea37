"""Locating the DLLs a win-64 wheel needs at their providers (the data is torchbuild/knowledge/dll_providers.py's).

``locate`` finds a file for each DLL pattern:

- on Windows, in the provider's directories first (CUDA_PATH_Vx_y\\bin, the MKL/OpenMP directories, System32 for
  the VC runtime);
- anywhere (and on Windows when those lack it), in the provider's win_amd64 wheel from the package index,
  downloaded once with pip and unpacked into ``<cache-dir>/dll-providers/<wheel>/`` (its .dll files, flat).

Every located DLL must be an AMD64 PE file; each carries the signer its provider's data names (checked by the
repair, torchbuild/stages/repair/windows.py). A DLL that no provider has raises ``ProviderError`` naming the DLL, the
provider and every place looked in.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from torchbuild.config import nesting
from torchbuild.host import archives, locks, pip
from torchbuild.knowledge.dll_providers import DATA_FILE, Provider, ProviderData, ProviderError, values_for
from torchbuild.platforms.windows import pe
from torchbuild.results import sha256_of
from torchbuild.wheel import wheelfile

PIP_TIMEOUT_S = 1800
LOCK_WAIT_S = 1800.0  # a CUDA provider wheel of 1-2 GB on a slow line
DONE = ".complete"  # written last into a provider's cache directory: the wheel it came from (JSON)


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
    signer: str = ""  # the organization whose signature the file must carry (the provider's)
    unsigned: str | None = None  # why the file may come unsigned (the data's `unsigned`), else None

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


def describe_wheel(path: Path, url: str) -> ProviderWheel:
    metadata = wheelfile.read_metadata(path)
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
    entry.parent.mkdir(parents=True, exist_ok=True)
    busy = f"another torchbuild process has been fetching {requirement} for {LOCK_WAIT_S:.0f} s"
    locks.made_once(entry.parent / f".{entry.name}.lock", (entry / DONE).is_file,
                    lambda: _make_entry(requirement, python, entry, log), busy=busy, wait_s=LOCK_WAIT_S)  # fmt: skip
    return entry


def _make_entry(requirement: str, python: str, entry: Path, log: Path) -> None:
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
        with archives.open_zip(wheels[0]) as archive:
            for member in archive.infolist():
                name = PurePosixPath(member.filename).name
                if name.lower().endswith(".dll") and not (staged / name).exists():
                    with archive.open(member) as src, (staged / name).open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        described = describe_wheel(wheels[0], fetched[-1].url.split("#", 1)[0])
        (staged / DONE).write_text(json.dumps(described.to_dict(), indent=1) + "\n", encoding="utf-8")
        shutil.rmtree(entry, ignore_errors=True)
        staged.replace(entry)


def provider_wheel(directory: Path) -> ProviderWheel | None:
    try:
        raw = nesting.loads((directory / DONE).read_text(encoding="utf-8"))
        return ProviderWheel(**{k: str(raw[k]) for k in ("filename", "name", "version", "sha256", "url", "license")})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # an entry without a readable record: it is made again below


def locate(
    patterns: Sequence[str],
    data: ProviderData,
    *,
    cuda: str,
    cudnn: int | None,
    python: str,
    cache_dir: Path,
    log: Path,
    on_windows: bool = os.name == "nt",
    env: Mapping[str, str] = os.environ,
) -> list[Located]:
    """A file for each DLL pattern, from its provider in ``data`` (the Plan's). Raises ProviderError naming the DLL
    and where it looked."""
    values = values_for(cuda, cudnn)
    located: list[Located] = []
    for pattern in patterns:
        provider = data.provider_for(pattern)
        if provider is None:
            names = ", ".join(p.name for p in data.providers)
            raise ProviderError(f"no DLL provider in {DATA_FILE} gives {pattern} (providers: {names})")
        hits, looked = _from_windows(provider, pattern, values, env) if on_windows else ([], [])
        hits = [_with_signer(hit, provider, data, cuda) for hit in hits]
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
        hits = [_with_signer(hit, provider, data, cuda) for hit in hits]
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


def _with_signer(hit: Located, provider: Provider, data: ProviderData, cuda: str) -> Located:
    return dataclasses.replace(hit, signer=provider.signer, unsigned=data.why_unsigned(hit.name, cuda))
