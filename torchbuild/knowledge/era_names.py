"""torchbuild/data/era_names.yaml, parsed once: the 2018 pytorch channel's names (``pytorch-cpu``,
``torchvision-cpu``, the ``cudaXY`` feature selectors) and which releases used them; ``for_cell`` says what one cell
of such a release publishes besides ``pytorch``.

The real records' shape is kept: ``pytorch-cpu`` is the CPU build renamed (not a metapackage), a CUDA build other
than its release's default carries ``features: cudaXY`` and the ``cudaXY`` metapackage ``track_features: cudaXY``.
Solvers of today (libmamba, rattler) ignore ``features`` (conda's own tests run features with the classic solver
only), so the builds also say it in a form every solver honours: each CUDA build of a selector release forbids the
selectors of its release's other CUDA versions (``cuda80 <0a0``), and the CPU ``pytorch`` of such a release forbids
them all, as the CUDA builds forbid ``cpuonly``. ``pytorch cuda80`` then has one answer, the CUDA 8.0 build, and no
answer at all where no CUDA 8.0 cell was built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles

DATA_FILE = "era_names.yaml"
WHERE = f"torchbuild/data/{DATA_FILE}"
CPU = "cpu"
# The artifact names (conda_package[<name>]) of what a cell of the era adds to its conda stage's outputs.
CPU_ALIAS = "pytorch-cpu"
SELECTOR = "cuda-selector"


@dataclass(frozen=True, kw_only=True)
class SelectorRule:
    torch: SpecifierSet
    default: str  # the CUDA version whose build carries no feature


@dataclass(frozen=True, kw_only=True)
class EraTable:
    cpu_torch: SpecifierSet
    cpu_package: str
    cpu_companions: Mapping[str, str]  # companion -> its CPU name
    selectors: tuple[SelectorRule, ...]
    selector_version: str
    selector_build: str
    selector_timestamp: int  # seconds since the epoch: the same file from every cell
    featured_offset: int  # added to the build number of a build with a feature


@dataclass(frozen=True, kw_only=True)
class Selector:
    """The ``cudaXY`` metapackage a CUDA cell of a selector release publishes: no files, no dependencies."""

    name: str
    version: str
    build: str
    timestamp: int  # seconds since the epoch, the same for every cell: one file under one name

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.version}-{self.build}"


@dataclass(frozen=True, kw_only=True)
class EraNames:
    """What one cell of the era publishes besides ``pytorch`` and how its ``pytorch`` says which CUDA it is."""

    cpu_package: str = ""  # the CPU build under the era's name (pytorch-cpu); "" for a CUDA cell
    companions: Mapping[str, str] = field(default_factory=dict)  # companion -> its era name (torchvision-cpu)
    features: tuple[str, ...] = ()  # the pytorch build's features (cuda80 for a CUDA 8.0 build of 1.0.0)
    selector: Selector | None = None  # the cudaXY metapackage this cell publishes
    constrains: tuple[str, ...] = ()  # the selectors this build forbids (cuda100 <0a0)
    build_number_offset: int = 0  # a featured build ranks below its release's default CUDA build

    @property
    def empty(self) -> bool:
        return not (self.cpu_package or self.selector or self.constrains)


def selector_name(cuda: str) -> str:
    """The feature / metapackage name of a CUDA version: cuda80 for 8.0, cuda100 for 10.0."""
    return "cuda" + cuda.replace(".", "")


def _specifier(value: Any, where: str) -> SpecifierSet:
    try:
        return SpecifierSet(str(value))
    except InvalidSpecifier:
        raise UserError(f"{WHERE}: {where} '{value}' is not a version specifier such as '>=0.4,<1.2'.") from None


def parse(raw: Any) -> EraTable:
    if not isinstance(raw, Mapping) or not raw.get("source"):
        raise UserError(f"{WHERE} must be a mapping with a non-empty 'source'.")
    try:
        cpu, package = raw["cpu"], raw["selector_package"]
        rules = tuple(
            SelectorRule(torch=_specifier(row["torch"], "selectors.torch"), default=str(row["default"]))
            for row in raw["selectors"]
        )
        return EraTable(
            cpu_torch=_specifier(cpu["torch"], "cpu.torch"),
            cpu_package=str(cpu["package"]),
            cpu_companions={str(k): str(v) for k, v in (cpu.get("companions") or {}).items()},
            selectors=rules,
            selector_version=str(package["version"]),
            selector_build=str(package["build"]),
            selector_timestamp=int(package["timestamp"]),
            featured_offset=int(raw["featured_build_number_offset"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{WHERE}: missing or malformed field {exc}.") from None


def load() -> EraTable:
    return datafiles.table(DATA_FILE, parse)


def for_cell(torch: str, cuda: str, release_cudas: Sequence[str], table: EraTable | None = None) -> EraNames:
    """The era's names for a cell of ``torch`` with ``cuda`` (cpu or X.Y); ``release_cudas``: the CUDA versions
    its release shipped on the cell's platform (releases.yaml), whose selectors a build forbids but its own."""
    table = table or load()
    version = Version(torch)
    rule = next((r for r in table.selectors if version in r.torch), None)
    others = [c for c in release_cudas if c not in (CPU, cuda)] if rule else []
    forbidden = tuple(f"{selector_name(c)} <0a0" for c in others)
    if cuda == CPU:
        renamed = version in table.cpu_torch
        return EraNames(
            cpu_package=table.cpu_package if renamed else "",
            companions=dict(table.cpu_companions) if renamed else {},
            constrains=forbidden,
        )
    if rule is None:
        return EraNames()
    name = selector_name(cuda)
    featured = cuda != rule.default
    return EraNames(
        features=(name,) if featured else (),
        build_number_offset=table.featured_offset if featured else 0,
        selector=Selector(
            name=name, version=table.selector_version, build=table.selector_build, timestamp=table.selector_timestamp
        ),
        constrains=forbidden,
    )
