"""torchbuild/data/cuda_wheels.yaml, parsed once: which CUDA each of PyPI's unlabelled linux torch wheels is built
for, and the shared libraries a torch wheel leaves to its declared requirements (the nvidia-* / cuda-toolkit wheels
of the linux CUDA builds from 1.13 on, ``mkl`` for torch 2.3.x on Windows), each with the exact wheel the
requirement resolves to for the target (file, sha256, size) and the libraries that wheel installs; and how a wheel
compiled from a checkout gets the same Requires-Dist (``extra_install_requirements``: torch's setup.py reads them from
the build environment).

``declared_libraries`` is the Plan's fact: the requirement wheels of one cell, evaluated with packaging.markers for
the cell's platform and Python. The versions are the table's resolution (``resolved``; for Windows MKL the newest
recorded wheel each specifier admits), so the Plan is the same on every machine and needs no index.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, cast, get_args

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge import datafiles

DATA_FILE = "cuda_wheels.yaml"
PINNED_IN = f"torchbuild/data/{DATA_FILE}"
MEASURED_PYTHON = "3.11"  # the linux rows were read from the cp311 wheels
# What the repair does with the libraries a wheel's declared requirements install (mkl, nvidia-*): leave them to the
# requirement, or vendor them into a self-contained wheel. The table says upstream's choice (``upstream``); a cell's
# is matrix.yaml's ``declared_libraries`` or --declared-libraries, unset: upstream's (config/declared_choice.py).
DeclaredLibraries = Literal["keep", "vendor"]


@dataclass(frozen=True)
class WheelRecord:
    """One requirement wheel as the index offers it for the target: what it installs."""

    name: str  # the PyPI project, canonical
    version: str
    file: str
    sha256: str
    size: int
    libraries: tuple[str, ...]  # shared libraries it installs, as wheel members (nvidia/cublas/lib/libcublas.so.12)
    requires: tuple[str, ...]  # its own Requires-Dist (extras left out)
    loaded_by_name: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (library, what it loads by name at run time)
    no_openmp: bool = False  # its libraries were read: none imports or loads an OpenMP runtime (``no_openmp``)


@dataclass(frozen=True)
class ReleaseRecord:
    """One torch release's unlabelled wheel for the measured target (linux x86_64), or a win_amd64 MKL row."""

    torch: str
    wheel: str
    sha256: str
    version_py: str  # torch/version.py's __version__ (2.10.0+cu128)
    cuda: str | None  # torch/version.py's cuda, X.Y (None: a CPU build)
    provides: str  # "requirements": the CUDA libraries come from requires_dist; "bundled": inside the wheel
    requires_dist: tuple[str, ...]  # the wheel's Requires-Dist lines of the library providers, verbatim
    resolved: Mapping[str, str]  # canonical name -> version: the table's resolution of the whole set
    extra_requires: Mapping[str, tuple[str, ...]]  # a requirement's name -> what its extras require (cuda-toolkit)


@dataclass(frozen=True, kw_only=True)
class RequirementWheel:
    """A declared requirement of the torch wheel whose wheel provides shared libraries (a Plan fact)."""

    requirement: str  # torch's Requires-Dist line that brings it (directly or through its own requirements)
    name: str
    version: str
    file: str
    sha256: str
    size: int
    libraries: tuple[str, ...]  # wheel members
    # (one of its libraries, the libraries of this wheel it loads by name at run time: MKL's CPU kernels), which a
    # wheel that vendors this one must carry although no import table names them
    loaded_by_name: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # read once, recorded in the data: none of its libraries imports or loads an OpenMP runtime, so the closure's
    # OpenMP count need not fetch it (the CUDA sets are GBs)
    no_openmp: bool = False

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def library_names(self) -> tuple[str, ...]:
        return tuple(PurePosixPath(path).name for path in self.libraries)

    def describe(self) -> str:
        declared = self.requirement.split(";")[0].strip()
        via = "" if canonicalize_name(Requirement(declared).name) == self.name else f", through {declared}"
        return f"{self.pin} ({self.file}{via})"


@dataclass(frozen=True)
class ExtraInstall:
    """How torch's setup.py takes extra Requires-Dist lines from the environment (extra_install_requirements)."""

    variable: str  # PYTORCH_EXTRA_INSTALL_REQUIREMENTS
    separator: str  # "|"
    declared_by_setup_py: Mapping[str, tuple[str, ...]]  # canonical project -> releases whose setup.py declares it


@dataclass(frozen=True)
class CudaWheels:
    """torchbuild/data/cuda_wheels.yaml, typed."""

    releases: Mapping[str, ReleaseRecord]  # linux x86_64, by torch release
    wheels: Mapping[str, Mapping[str, WheelRecord]]  # linux x86_64: name -> version -> wheel
    windows_releases: Mapping[str, ReleaseRecord]  # win_amd64 (torch 2.3.x: mkl)
    windows_wheels: Mapping[str, Mapping[str, WheelRecord]]
    # platform -> keep | vendor: what upstream's wheels do (declared_libraries)
    upstream_choice: Mapping[str, DeclaredLibraries]
    vendor_refused: Mapping[str, str]  # platform -> why its cells cannot vendor them
    extra_install: ExtraInstall


def _wheel(
    name: str, version: str, raw: Mapping[str, Any], libraries_key: str, no_openmp: Mapping[str, Any]
) -> WheelRecord:
    try:
        return WheelRecord(
            name=name,
            version=version,
            file=str(raw["file"]),
            sha256=str(raw["sha256"]),
            size=int(raw["size"]),
            libraries=tuple(str(p) for p in raw.get(libraries_key) or ()),
            requires=tuple(str(r) for r in raw.get("requires") or ()),
            loaded_by_name=tuple(
                (str(loader), tuple(str(n) for n in loads))
                for loader, loads in (raw.get("loaded_by_name") or {}).items()
            ),
            no_openmp=version in map(str, no_openmp.get(name) or ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{DATA_FILE}: wheels.{name}.{version} lacks file, sha256 or size ({exc})") from None


def _wheels(
    raw: Mapping[str, Any], libraries_key: str, no_openmp: Mapping[str, Any] | None = None
) -> dict[str, dict[str, WheelRecord]]:
    read: dict[str, Any] = {canonicalize_name(str(k)): v for k, v in (no_openmp or {}).items()}
    return {
        canonicalize_name(str(name)): {str(v): _wheel(canonicalize_name(str(name)), str(v), w, libraries_key, read)
                                       for v, w in versions.items()}
        for name, versions in raw.items()
    }  # fmt: skip


def _cuda_of(raw: Mapping[str, Any]) -> str | None:
    cuda = raw.get("cuda")
    if not cuda:
        return None
    return ".".join(str(cuda).split(".")[:2])


def _release(raw: Mapping[str, Any]) -> ReleaseRecord:
    toolkit = raw.get("cuda_toolkit") or {}
    extra = {"cuda-toolkit": tuple(str(r) for r in toolkit.get("requires") or ())} if toolkit else {}
    return ReleaseRecord(
        torch=str(raw["torch"]),
        wheel=str(raw.get("wheel", "")),
        sha256=str(raw.get("sha256", "")),
        version_py=str(raw.get("version_py", "")),
        cuda=_cuda_of(raw),
        provides=str(raw.get("provides", "")),
        requires_dist=tuple(str(r) for r in raw.get("requires_dist") or ()),
        resolved={canonicalize_name(str(k)): str(v) for k, v in (raw.get("resolved") or {}).items()},
        extra_requires=extra,
    )


def _windows_release(torch: str, raw: Mapping[str, Any]) -> ReleaseRecord:
    return ReleaseRecord(
        torch=torch,
        wheel=str(raw.get("wheel", "")),
        sha256="",
        version_py=str(raw.get("version_py", "")),
        cuda=None,
        provides="requirements",
        requires_dist=tuple(str(r) for r in raw.get("requires_dist") or ()),
        resolved={},
        extra_requires={},
    )


def _upstream(platform: str, value: object) -> DeclaredLibraries:
    """What upstream's wheels of ``platform`` do with their declared libraries: keep | vendor."""
    valid = get_args(DeclaredLibraries)
    if value not in valid:
        raise UserError(
            f"torchbuild/data/{DATA_FILE}: declared_libraries.upstream.{platform} '{value}' is not one of "
            f"{one_of(valid)}."
        )
    return cast(DeclaredLibraries, value)


def _parse(raw: Mapping[str, Any]) -> CudaWheels:
    releases = {str(r["torch"]): _release(r) for r in raw["releases"]}
    mkl = raw.get("windows_mkl") or {}
    choice = raw.get("declared_libraries") or {}
    extra = raw["extra_install_requirements"]
    by_setup_py = extra.get("declared_by_setup_py") or {}
    return CudaWheels(
        releases=releases,
        wheels=_wheels(raw["wheels"], "libraries", raw.get("no_openmp")),
        windows_releases={str(k): _windows_release(str(k), v) for k, v in (mkl.get("torch") or {}).items()},
        windows_wheels=_wheels(mkl.get("wheels") or {}, "dlls"),
        upstream_choice={str(k): _upstream(str(k), v) for k, v in (choice.get("upstream") or {}).items()},
        vendor_refused={str(k): " ".join(str(v).split()) for k, v in (choice.get("vendor_refused") or {}).items()},
        extra_install=ExtraInstall(
            variable=str(extra["variable"]),
            separator=str(extra["separator"]),
            declared_by_setup_py={canonicalize_name(str(k)): tuple(map(str, v)) for k, v in by_setup_py.items()},
        ),
    )


def load() -> CudaWheels:
    return datafiles.table(DATA_FILE, _parse)


# --- the Plan's facts ----------------------------------------------------------------------------------------


def unlabelled_cuda(platform: str, torch: str, cuda: str, data: CudaWheels | None = None) -> bool:
    """Whether PyPI's unlabelled wheel of ``torch`` for ``platform`` is the CUDA ``cuda`` build whose CUDA
    libraries come from its declared requirements (linux x86_64 only: PyPI has no CUDA build for Windows)."""
    data = data or load()
    record = data.releases.get(torch)
    return platform == "linux-64" and record is not None and record.cuda == cuda and record.provides == "requirements"


def release_record(platform: str, torch: str, data: CudaWheels | None = None) -> ReleaseRecord | None:
    data = data or load()
    return (data.windows_releases if platform == "win-64" else data.releases).get(torch)


def _requirement(text: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise UserError(f"{DATA_FILE}: {text!r} is not a requirement: {exc}") from None


def _choose(
    name: str, requirement: Requirement, record: ReleaseRecord, wheels: Mapping[str, Mapping[str, WheelRecord]]
) -> WheelRecord | None:
    """The wheel ``name`` resolves to: the release's recorded resolution, else the newest recorded wheel the
    specifier admits."""
    versions = wheels.get(name, {})
    if name in record.resolved:
        return versions.get(record.resolved[name])
    admitted = [v for v in versions if requirement.specifier.contains(v, prereleases=True)]
    return versions[max(admitted, key=Version)] if admitted else None


def _applies(requirement: Requirement, markers: Mapping[str, str]) -> bool:
    marker: Marker | None = requirement.marker
    return marker is None or marker.evaluate(dict(markers))


def declared_libraries(
    platform: str, torch: str, cuda: str, markers: Mapping[str, str], data: CudaWheels | None = None
) -> tuple[RequirementWheel, ...]:
    """The requirement wheels of a cell that provide shared libraries: the torch wheel's Requires-Dist evaluated for
    the target (``markers``: PEP 508 values of the target), each followed through its own requirements (mkl ->
    intel-openmp, tbb; cuda-toolkit[cublas] -> nvidia-cublas). Empty where the cell's wheel is not a recorded one
    (a CUDA cell whose unlabelled wheel is another CUDA's, a CPU linux cell)."""
    data = data or load()
    if platform == "linux-64" and not unlabelled_cuda(platform, torch, cuda, data):
        return ()
    record = release_record(platform, torch, data)
    if record is None or record.provides != "requirements":
        return ()
    wheels = data.windows_wheels if platform == "win-64" else data.wheels
    found: dict[str, RequirementWheel] = {}
    # Breadth first over every declared line at once: a wheel is credited to the line that names it, and only
    # otherwise to the first line whose requirements reach it.
    todo: list[tuple[str, Requirement, str]] = []
    for line in record.requires_dist:
        declared = _requirement(line)
        if _applies(declared, markers):
            todo.append((canonicalize_name(declared.name), declared, line))
    seen: set[str] = set()
    while todo:
        name, requirement, line = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        wheel = _choose(name, requirement, record, wheels)
        if wheel is None:
            continue
        if wheel.libraries:
            found[name] = RequirementWheel(
                requirement=line, name=name, version=wheel.version, file=wheel.file, sha256=wheel.sha256,
                size=wheel.size, libraries=wheel.libraries, loaded_by_name=wheel.loaded_by_name,
                no_openmp=wheel.no_openmp,
            )  # fmt: skip
        for text in (*wheel.requires, *record.extra_requires.get(name, ())):
            more = _requirement(text)
            if _applies(more, markers):
                todo.append((canonicalize_name(more.name), more, line))
    return tuple(found.values())


def extra_install_requirements(platform: str, torch: str, data: CudaWheels | None = None) -> dict[str, str]:
    """The build environment that makes a compiled wheel of ``torch`` declare its release record's library
    requirements as PyPI's wheel does (the record's Requires-Dist lines, verbatim, markers and all, joined as torch's
    setup.py splits them), less those the release's setup.py declares itself; empty where nothing is left."""
    data = data or load()
    record = release_record(platform, torch, data)
    extra = data.extra_install
    lines = [
        line for line in (record.requires_dist if record else ())
        if torch not in extra.declared_by_setup_py.get(canonicalize_name(_requirement(line).name), ())
    ]  # fmt: skip
    return {extra.variable: extra.separator.join(lines)} if lines else {}


def provided_libraries(wheels: Sequence[RequirementWheel]) -> dict[str, str]:
    """Library file name -> the requirement wheel that installs it, described (for the closure checks)."""
    found: dict[str, str] = {}
    for wheel in wheels:
        for name in wheel.library_names:
            found.setdefault(name, wheel.describe())
    return found


def _family(library: str) -> str:
    """libcudnn of libcudnn_cnn.so.9, mkl of mkl_intel_thread.2.dll, libcublas of libcublas.so.13."""
    return re.split(r"[._]", library.lower(), maxsplit=1)[0]


def should_have_provided(library: str, wheels: Sequence[RequirementWheel]) -> str:
    """For a library nothing provides: the declared requirement that installs its family (another version of it,
    a sibling library) and so should have provided it, or the declared ones; empty where the wheel declares none."""
    family = _family(library)
    for wheel in wheels:
        kin = [name for name in wheel.library_names if _family(name) == family]
        if kin:
            return (
                f"the declared requirement {wheel.describe()} should have provided it: it installs "
                f"{', '.join(kin[:4])}{' ...' if len(kin) > 4 else ''}, not {library}"
            )
    if not wheels:
        return ""
    return f"no declared requirement provides it (the wheel declares {', '.join(w.pin for w in wheels)})"


_DATA_DIR = re.compile(r"^[^/]+\.data/(purelib|platlib)/")


def site_packages_libraries(wheels: Sequence[RequirementWheel]) -> dict[str, str]:
    """Where each library of ``wheels`` lands below site-packages (a wheel's purelib/platlib parts; its ``.data/data``
    parts land elsewhere, in the prefix) -> the requirement wheel that installs it, described."""
    found: dict[str, str] = {}
    for wheel in wheels:
        for member in wheel.libraries:
            if ".data/data/" in member:
                continue
            found.setdefault(_DATA_DIR.sub("", member), wheel.describe())
    return found


def left_to_vendor_wheels(
    provided: Mapping[str, str], wheels: Sequence[RequirementWheel], conda_names: Mapping[str, str]
) -> dict[str, str]:
    """Of ``provided`` (DLL pattern -> conda run dependency), the patterns whose package is none of the declared
    requirements (``conda_names``: PyPI name -> conda name): a layout takes those from the vendor wheels of
    dll_providers.yaml, and the others from the declared requirements' pinned wheels (mkl 2021.4.0 for torch 2.3.1,
    whose DLL names differ from the newer vendor wheel's)."""
    covered = {conda_names.get(w.name, w.name) for w in wheels}
    return {pattern: package for pattern, package in provided.items() if package not in covered}
