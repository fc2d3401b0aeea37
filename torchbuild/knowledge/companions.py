"""torchbuild/data/companions.yaml, parsed once: the packages a cell may ship beside torch (its ``packages:``
section: torchvision, torchaudio, and whatever comes next: each one's repository and the platforms the stages build
it for), which release of each pairs with each torch release, what each requires of torch, and the wheels PyPI has
of it per platform (its build, the torch libraries its extension modules link, the files by Python version with
sha256). Also the names ``packages:`` takes, the OpenMP runtimes torch's own wheels import (``torch_openmp``) and
the releases whose own wheels load more than one (``upstream_openmp``)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge import datafiles

DATA_FILE = "companions.yaml"
WHERE = f"torchbuild/data/{DATA_FILE}"
TORCH = "torch"
ANY_PYTHON = "any-python"  # a py3-none wheel: one file for every Python
ANY_PLATFORM = "any"  # a pure-Python wheel: one file for every platform
# What a CUDA build of a companion links that a CPU torch does not have.
_CUDA_LIBRARY = re.compile(r"lib(torch_cuda|c10_cuda|cudart|nvjpeg)[.\w-]*\.so[.\d]*$")


@dataclass(frozen=True, kw_only=True)
class Package:
    """A package a cell may ship beside torch (an entry of ``packages:``)."""

    name: str
    repository: str  # its source repository: what a checkout clones, its conda package's about.home
    built_on: tuple[str, ...]  # the platforms whose cells the stages build it for, from PyPI's wheel
    # "<platform> cpu|cuda" -> why the stages do not build it for such a cell though a wheel of it pairs
    not_built: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # How a checkout of it is compiled against a cell's torch: the variables its setup.py reads for the version it
    # carries and for its Requires-Dist's pin of torch ("" where the data says none: the build takes the checkout's)
    version_env: str = ""
    torch_env: str = ""

    def why_not_built(self, platform: str, local_version: str) -> str | None:
        """Why the stages do not build it for a cell of ``platform`` and torch build ``local_version`` (cpu, cu130)
        though its platform is one they build it for; None where nothing stops them."""
        return self.not_built.get(f"{platform} {'cpu' if local_version == 'cpu' else 'cuda'}")


@dataclass(frozen=True, kw_only=True)
class Wheel:
    file: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Build:
    """The wheels of one companion release for one platform (``any``: pure Python, every platform)."""

    platform: str
    requires_torch: str  # Requires-Dist on torch, verbatim; "" where the wheels declare none
    label: str  # the local label of its __version__: cpu, cu130, ...; "" where it has none
    links: tuple[str, ...] | None  # torch/CUDA libraries its extension modules need (DT_NEEDED); None: not read
    bundles: tuple[str, ...]
    wheels: Mapping[str, Wheel]  # Python X.Y (or any-python) -> the wheel
    yanked: str = ""  # PyPI's reason where its wheels are yanked (pip installs them only when pinned exactly)
    # library (FFmpeg) -> the DLLs its extension modules import that it loads only where that library is installed
    on_demand: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # The OpenMP runtimes its libraries and extensions import (win-64: DLL names); None: not read
    openmp: tuple[str, ...] | None = None

    @property
    def on_demand_dlls(self) -> dict[str, str]:
        """Each DLL loaded on demand (lower case) -> its library."""
        return {dll.lower(): library for library, dlls in self.on_demand.items() for dll in dlls}

    @property
    def cuda_libraries(self) -> tuple[str, ...]:
        """What it links or bundles that only a CUDA torch provides: empty for a CPU build."""
        linked = [name for name in self.links or () if _CUDA_LIBRARY.match(name)]
        return tuple(linked or [name for name in self.bundles if _CUDA_LIBRARY.match(name)])

    def wheel_for(self, python: str) -> Wheel | None:
        return self.wheels.get(python) or self.wheels.get(ANY_PYTHON)

    def admits(self, torch_version: str) -> bool:
        """Whether its torch requirement admits ``torch_version`` (``2.13.0+cpu``); a wheel without one admits all."""
        return not self.requires_torch or Version(torch_version) in SpecifierSet(self.requires_torch)


@dataclass(frozen=True, kw_only=True)
class Release:
    name: str
    version: str
    builds: Mapping[str, Build]  # platform (linux-64, win-64, any) -> its wheels

    def build_for(self, platform: str) -> Build | None:
        return self.builds.get(platform) or self.builds.get(ANY_PLATFORM)


@dataclass(frozen=True, kw_only=True)
class Pair:
    """What the data pairs with one torch release: a companion release (and what decided it), or why none."""

    release: str | None
    by: str = ""
    none: str = ""


@dataclass(frozen=True, kw_only=True)
class UpstreamOpenMp:
    """A torch release whose own wheels (PyPI's, by sha256) load more than one OpenMP runtime into one process."""

    platform: str
    torch: str
    runtimes: tuple[str, ...]  # lower-case DLL names, sorted, the declared requirements' included
    wheels: Mapping[str, Wheel]  # Python X.Y -> upstream's wheel

    def of(self, sha256: str) -> Wheel | None:
        """Upstream's wheel whose sha256 is ``sha256``, or None (a compiled or altered wheel)."""
        return next((wheel for wheel in self.wheels.values() if wheel.sha256 == sha256), None)


@dataclass(frozen=True, kw_only=True)
class Table:
    packages: Mapping[str, Package]  # name -> the package, in the order the plan lists them
    pairs: Mapping[str, Mapping[str, Pair]]  # torch release -> companion name -> Pair
    releases: Mapping[str, Mapping[str, Release]]  # companion name -> version -> Release
    # platform -> torch release -> the OpenMP runtimes torch's wheel imports (read from PyPI's wheels)
    torch_openmp: Mapping[str, Mapping[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    # platform -> torch release -> what its own wheels load together, where that is more than one runtime
    upstream_openmp: Mapping[str, Mapping[str, UpstreamOpenMp]] = dataclasses.field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        """The packages a cell may ship beside torch (torchvision, torchaudio), in the data's order."""
        return tuple(self.packages)

    def built_on(self, platform: str) -> tuple[str, ...]:
        """The packages the stages build for cells of ``platform`` (none: the pin step asks the indexes nothing)."""
        return tuple(name for name, package in self.packages.items() if platform in package.built_on)

    def pair(self, name: str, torch_release: str) -> Pair:
        row = self.pairs.get(torch_release)
        if row is None:
            return Pair(release=None, none=f"{WHERE} has no row for torch {torch_release}")
        return row[name]

    def release(self, name: str, version: str) -> Release:
        """A companion release by version; an unknown one is refused naming the newest ones the data knows."""
        known = self.releases[name]
        if version not in known:
            newest = sorted(known, key=Version, reverse=True)[:6]
            raise UserError(f"{name} {version} is not a release {WHERE} knows; the newest are {one_of(newest)}.")
        return known[version]


def _fail(where: str, problem: str) -> UserError:
    return UserError(f"{WHERE}: {where}: {problem}")


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise _fail(where, "must be a list")
    return tuple(str(item) for item in raw)


def _on_demand(raw: Any, where: str) -> dict[str, tuple[str, ...]]:
    """``{FFmpeg: [avutil-58.dll, ...]}``: DLL names (no paths), each under one library."""
    if not isinstance(raw, dict) or not raw:
        raise _fail(where, "give {library: [DLL names]}, e.g. {FFmpeg: [avutil-58.dll]}")
    seen: dict[str, str] = {}
    for library, dlls in raw.items():
        for dll in _strings(dlls, f"{where} {library}"):
            if not re.fullmatch(r"[\w.+-]+\.dll", dll, re.IGNORECASE):
                raise _fail(f"{where} {library}", f"{dll!r} is not a DLL name (give e.g. avutil-58.dll)")
            if dll.lower() in seen:
                raise _fail(where, f"{dll} is listed under both {seen[dll.lower()]} and {library}")
            seen[dll.lower()] = str(library)
    return {str(library): _strings(dlls, where) for library, dlls in raw.items()}


def _build(name: str, version: str, platform: str, raw: Mapping[str, Any]) -> Build:
    where = f"{name} {version} {platform}"
    requires = str(raw.get("requires_torch", ""))
    try:
        SpecifierSet(requires)
    except InvalidSpecifier:
        raise _fail(where, f"requires_torch {requires!r} is not a version specifier") from None
    wheels = {str(python): _wheel(row, f"{where} wheels {python}") for python, row in (raw.get("wheels") or {}).items()}
    return Build(
        platform=platform,
        requires_torch=requires,
        label=str(raw.get("build", "")),
        links=_strings(raw["links"], f"{where} links") if "links" in raw else None,
        bundles=_strings(raw.get("bundles", []), f"{where} bundles"),
        wheels=wheels,
        yanked=" ".join(str(raw.get("yanked", "")).split()),
        on_demand=_on_demand(raw["on_demand"], f"{where} on_demand") if "on_demand" in raw else {},
        openmp=_dll_names(raw["openmp"], f"{where} openmp") if "openmp" in raw else None,
    )


def _wheel(row: Any, where: str) -> Wheel:
    if not (isinstance(row, list) and len(row) == 2 and re.fullmatch(r"[0-9a-f]{64}", str(row[1]))):
        raise _fail(where, "give [file name, sha256 of 64 hex digits]")
    return Wheel(file=str(row[0]), sha256=str(row[1]))


def _dll_names(raw: Any, where: str) -> tuple[str, ...]:
    names = _strings(raw, where)
    bad = [name for name in names if not re.fullmatch(r"[\w.+-]+\.dll", name, re.IGNORECASE)]
    if bad:
        raise _fail(where, f"{bad[0]!r} is not a DLL name (give e.g. vcomp140.dll)")
    return names


def _pair(raw: Any, where: str, known: Mapping[str, Release]) -> Pair:
    if not isinstance(raw, dict) or ("release" in raw) == ("none" in raw):
        raise _fail(where, "give {release: X, by: ...} or {none: why}")
    if "none" in raw:
        return Pair(release=None, none=" ".join(str(raw["none"]).split()))
    release = str(raw["release"])
    if release not in known:
        raise _fail(where, f"release {release} has no entry of its own in the table")
    return Pair(release=release, by=str(raw.get("by", "")))


def _packages(raw: Any) -> dict[str, Package]:
    if not isinstance(raw, dict) or not raw:
        raise _fail("packages", "give {name: {repository: URL, built_on: [platforms]}} for each package beside torch")
    found = {}
    for name, row in raw.items():
        where = f"packages {name}"
        if not isinstance(row, dict) or not str(row.get("repository", "")).startswith("https://"):
            raise _fail(where, "give its repository (https://...) and built_on: [platforms], [] where none")
        if str(name) == TORCH:
            raise _fail(where, "torch is the package the others ship beside; list only those")
        not_built = row.get("not_built") or {}
        if not isinstance(not_built, dict) or any(not re.fullmatch(r"\S+ (cpu|cuda)", str(k)) for k in not_built):
            raise _fail(f"{where} not_built", "give {'<platform> cpu' or '<platform> cuda': why}")
        checkout = row.get("checkout") or {}
        if not isinstance(checkout, dict) or set(checkout) - {"version_env", "torch_env"}:
            raise _fail(f"{where} checkout", "give {version_env: VARIABLE, torch_env: VARIABLE}")
        found[str(name)] = Package(
            name=str(name), repository=str(row["repository"]),
            built_on=_strings(row.get("built_on", []), f"{where} built_on"),
            not_built={str(k): " ".join(str(v).split()) for k, v in not_built.items()},
            version_env=str(checkout.get("version_env", "")), torch_env=str(checkout.get("torch_env", "")),
        )  # fmt: skip
    return found


def _parse(raw: Mapping[str, Any]) -> Table:
    packages = _packages(raw.get("packages"))
    releases: dict[str, dict[str, Release]] = {}
    for name in packages:
        releases[name] = {}
        for version, platforms in (raw.get(name) or {}).items():
            try:
                Version(str(version))
            except InvalidVersion:
                raise _fail(name, f"{version!r} is not a version") from None
            builds = {str(p): _build(name, str(version), str(p), row) for p, row in (platforms or {}).items()}
            releases[name][str(version)] = Release(name=name, version=str(version), builds=builds)
    pairs = {}
    for torch_release, row in (raw.get("pairs") or {}).items():
        missing = [name for name in packages if name not in (row or {})]
        if missing:
            raise _fail(f"pairs {torch_release}", f"names no {one_of(missing)}")
        pairs[str(torch_release)] = {
            name: _pair(row[name], f"pairs {torch_release} {name}", releases[name]) for name in packages
        }
    openmp = {
        str(platform): {str(release): _dll_names(dlls, f"torch_openmp {platform} {release}") for release, dlls in
                        (rows or {}).items()}
        for platform, rows in (raw.get("torch_openmp") or {}).items()
    }  # fmt: skip
    return Table(
        packages=packages, pairs=pairs, releases=releases, torch_openmp=openmp, upstream_openmp=_upstream_openmp(raw)
    )


def _upstream_openmp(raw: Mapping[str, Any]) -> dict[str, dict[str, UpstreamOpenMp]]:
    found: dict[str, dict[str, UpstreamOpenMp]] = {}
    for platform, rows in (raw.get("upstream_openmp") or {}).items():
        for release, row in (rows or {}).items():
            where = f"upstream_openmp {platform} {release}"
            runtimes = _dll_names((row or {}).get("runtimes"), f"{where} runtimes")
            wheels = (row or {}).get("wheels") or {}
            if len(runtimes) < 2 or not wheels:
                raise _fail(where, "needs two or more runtimes and the wheels (Python -> [file, sha256]) they hold for")
            found.setdefault(str(platform), {})[str(release)] = UpstreamOpenMp(
                platform=str(platform), torch=str(release), runtimes=tuple(sorted({r.lower() for r in runtimes})),
                wheels={str(py): _wheel(pair, f"{where} wheels {py}") for py, pair in wheels.items()},
            )  # fmt: skip
    return found


def upstream_openmp(platform: str, torch_release: str) -> UpstreamOpenMp | None:
    """The OpenMP runtimes upstream's own wheels of ``torch_release`` load together, where the data records more
    than one; None where it records none."""
    return load().upstream_openmp.get(platform, {}).get(torch_release)


def load() -> Table:
    return datafiles.table(DATA_FILE, _parse)


def companion_names() -> tuple[str, ...]:
    """The packages a cell may ship beside torch (torchvision, torchaudio), in the data's order."""
    return load().names


def parse_package(text: str) -> tuple[str, str | None]:
    """``torchvision`` or ``torchvision==0.28.0`` -> (name, release or None); anything else is refused naming the
    packages a cell can ship (and, for an unknown release, the releases the data knows)."""
    name, sep, release = text.strip().partition("==")
    name = name.strip().lower()
    names = (TORCH, *companion_names())
    if name not in names or (sep and not release.strip()):
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close and close[0] != name else ""
        raise UserError(
            f"'{text}' is not a package a cell ships.{hint} Give {one_of(names)}, a companion optionally with "
            "its release (torchvision==0.28.0)."
        )
    if not sep:
        return name, None
    if name == TORCH:
        raise UserError(f"'{text}': torch's release is chosen by 'torch:' (or --torch), not in packages.")
    return name, load().release(name, release.strip()).version


def check_packages(texts: tuple[str, ...]) -> tuple[str, ...]:
    """A packages list: each entry valid, none twice, torch among them (every cell ships torch)."""
    names = [parse_package(text)[0] for text in texts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{one_of(twice)} is named more than once in packages; name each package once.")
    if TORCH not in names:
        beside = one_of(companion_names())
        raise UserError(f"packages must include torch: every cell ships torch, with {beside} beside it.")
    return tuple(texts)
