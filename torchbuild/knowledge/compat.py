"""Compatibility knowledge, loaded from the YAML tables in ``torchbuild/data``.

The tables are the source of truth (each carries a source note); this module only gives them types and
answers questions about them. No compatibility fact lives in code.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchbuild.knowledge import datafiles
from torchbuild.knowledge.provisioning import Provisioning, provisioning_of

# The platforms a cell can be built for: the one list of them (matrix.yaml's schema, --platform's help).
PlatformName = Literal["win-64", "linux-64"]
PLATFORMS: tuple[PlatformName, ...] = get_args(PlatformName)
CPU = "cpu"


def version_key(text: str) -> tuple[int, ...]:
    """'14.11' -> (14, 11); '9.0' -> (9, 0): dotted versions (toolsets, CUDA, Python, file versions, conda records)
    compare numerically per part; a part that is not a number ('0rc1' in '3.13.0rc1') is -1, before every number.
    The one sort key of a dotted version."""
    return tuple(int(part) if part.isdigit() else -1 for part in text.split("."))


@dataclass(frozen=True)
class Range:
    """An inclusive range of dotted versions (MSVC toolsets, VS releases) or integers (gcc majors)."""

    min: str
    max: str

    def __contains__(self, version: object) -> bool:
        key = version_key(str(version))
        return version_key(self.min) <= key <= version_key(self.max)

    def __str__(self) -> str:
        return self.min if self.min == self.max else f"{self.min}-{self.max}"


@dataclass(frozen=True)
class Note:
    """An ``uncertain`` note of a table row: what was inferred rather than read, and from where. ``platforms``
    empty: it concerns every platform; else only the plans of those."""

    text: str
    platforms: tuple[str, ...] = ()


def notes_for(notes: tuple[Note, ...], platform: str) -> str:
    """The notes that concern ``platform``, as one text."""
    return " ".join(n.text for n in notes if not n.platforms or platform in n.platforms)


@dataclass(frozen=True)
class VisualStudio:
    year: int
    version: str
    toolsets: Range
    generator: str
    generator_platform: str | None


@dataclass(frozen=True)
class KnownBadVisualStudio:
    versions: Range
    error: str
    message: str
    fix: str


@dataclass(frozen=True)
class CudaRelease:
    version: str
    cudnn: int
    msvc: Range
    gcc: Range
    arch_list: str
    wheel_tag: str
    nvtx: str
    uncertain: tuple[Note, ...] = ()

    @property
    def major(self) -> int:
        return version_key(self.version)[0]

    @property
    def next_minor(self) -> str:
        major, minor = version_key(self.version)[:2]
        return f"{major}.{minor + 1}"


@dataclass(frozen=True)
class PlatformSupport:
    python: tuple[str, ...]
    cuda: tuple[str, ...]


@dataclass(frozen=True)
class TorchRelease:
    version: str
    released: str
    build: str
    platforms: Mapping[str, PlatformSupport]
    cudnn: Mapping[str, int] = field(default_factory=dict)
    uncertain: tuple[Note, ...] = ()

    def supports(self, platform: str, cuda: str, python: str) -> bool:
        support = self.platforms.get(platform)
        return support is not None and cuda in support.cuda and python in support.python


@dataclass(frozen=True)
class Rule:
    """One row of packaging.yaml: a value that applies when every condition of ``when`` matches."""

    value: str
    when: Mapping[str, Any]
    why: str = ""

    def applies(self, platform: str, torch: str, cuda: str, python: str | None = None) -> bool:
        for key, condition in self.when.items():
            if key == "platform":
                allowed = [condition] if isinstance(condition, str) else list(condition)
                if platform not in allowed:
                    return False
            elif key == "torch":
                if Version(torch) not in SpecifierSet(condition):
                    return False
            elif key == "cuda":
                if cuda == CPU:
                    return False
                if condition != "*" and Version(cuda) not in SpecifierSet(condition):
                    return False
            elif key == "cpu":
                if (cuda == CPU) != bool(condition):
                    return False
            elif key == "python":
                if python is None or Version(python) not in SpecifierSet(condition):
                    return False
            else:
                raise ValueError(f"packaging.yaml: unknown condition {key!r}")
        return True


@dataclass(frozen=True)
class SolveChannel:
    """packaging.yaml `solve_channels`: the stored real repodata a cell's package must solve against."""

    channel: str
    rule: Rule  # rule.value is the channel name; rule.when selects the cells
    absent: tuple[str, ...]  # run dependencies the stored subset has no record of for this era


@dataclass(frozen=True)
class Override:
    """packaging.yaml `requirement_overrides`: the conda spec that replaces a wheel requirement's converted pin."""

    pypi: str  # canonical PyPI name
    rule: Rule  # rule.value is the conda spec


@dataclass(frozen=True)
class VcRuntimeRule:
    """packaging.yaml `vc_runtime`: the VC runtime package a win-64 conda package depends on (vc_runtime.py)."""

    package: str
    minimum: str
    upper: str = ""
    versions: tuple[tuple[str, str], ...] = ()  # (MSVC version specifier, package version), for `vc`


@dataclass(frozen=True)
class Packaging:
    wheel_platform_tags: tuple[Rule, ...]
    run_dependencies: tuple[Rule, ...]
    cuda_build_number_offset: int
    cuda_run_constrained: tuple[str, ...]
    github_runners: Mapping[str, str]
    solve_channels: tuple[SolveChannel, ...] = ()
    requirement_overrides: tuple[Override, ...] = ()
    unlabelled_wheels: tuple[Rule, ...] = ()  # rule.value is the local label PyPI leaves off (cpu)
    undeclared_requirements: tuple[Rule, ...] = ()  # rule.value is the Requires-Dist line torch lacks
    broken_scripts: tuple[Rule, ...] = ()  # rule.value is a console script upstream's wheel cannot start
    vc_runtime: tuple[tuple[Rule, VcRuntimeRule], ...] = ()

    def undeclared_for(self, platform: str, torch: str, cuda: str, python: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.undeclared_requirements if r.applies(platform, torch, cuda, python))

    def broken_scripts_for(self, platform: str, torch: str, cuda: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.broken_scripts if r.applies(platform, torch, cuda))

    def vc_runtime_for(self, platform: str, torch: str, cuda: str) -> VcRuntimeRule | None:
        return next((v for rule, v in self.vc_runtime if rule.applies(platform, torch, cuda)), None)

    def solve_channel_for(self, platform: str, torch: str, cuda: str, python: str) -> SolveChannel | None:
        return next((c for c in self.solve_channels if c.rule.applies(platform, torch, cuda, python)), None)


@dataclass(frozen=True)
class Compat:
    releases: tuple[TorchRelease, ...]  # ascending by version
    cuda: Mapping[str, CudaRelease]
    visual_studio: tuple[VisualStudio, ...]  # ascending by year
    known_bad: tuple[KnownBadVisualStudio, ...]
    packaging: Packaging
    provisioning: Provisioning

    def release(self, version: str) -> TorchRelease | None:
        for release in self.releases:
            if release.version == version:
                return release
        return None

    def cuda_versions(self) -> list[str]:
        return sorted(self.cuda, key=version_key)

    def python_versions(self) -> list[str]:
        seen = {py for r in self.releases for p in r.platforms.values() for py in p.python}
        return sorted(seen, key=version_key)

    def cudnn_for(self, release: TorchRelease, cuda: str) -> int | None:
        if cuda == CPU:
            return None
        return release.cudnn.get(cuda, self.cuda[cuda].cudnn)

    def visual_studio_for_toolset(self, toolset: str) -> VisualStudio:
        for vs in self.visual_studio:
            if toolset in vs.toolsets:
                return vs
        raise KeyError(toolset)

    def toolsets(self) -> list[str]:
        """Every MSVC toolset the tables know, e.g. 14.0, 14.10 ... 14.44."""
        result: list[str] = []
        for vs in self.visual_studio:
            major, low = version_key(vs.toolsets.min)[:2]
            high = version_key(vs.toolsets.max)[1]
            result.extend(f"{major}.{minor}" for minor in range(low, high + 1))
        return result


def _range(raw: Mapping[str, Any]) -> Range:
    return Range(min=str(raw["min"]), max=str(raw["max"]))


def _notes(raw: Any) -> tuple[Note, ...]:
    """``uncertain:`` is one text (every platform), or a list of texts and {platform, note} mappings."""
    if not raw:
        return ()
    items = [raw] if isinstance(raw, str) else list(raw)
    notes = []
    for item in items:
        if isinstance(item, str):
            notes.append(Note(item.strip()))
            continue
        unknown = set(item) - {"note", "platform"}
        platforms = item.get("platform", ())
        platforms = (platforms,) if isinstance(platforms, str) else tuple(platforms)
        if unknown or "note" not in item or not set(platforms) <= set(PLATFORMS):
            raise ValueError(f"an uncertain note must be a text or {{platform: win-64|linux-64, note: ...}}: {item}")
        notes.append(Note(str(item["note"]).strip(), platforms))
    return tuple(notes)


def _rules(raw: list[Mapping[str, Any]], value_key: str) -> tuple[Rule, ...]:
    return tuple(
        Rule(value=str(row[value_key]), when=row.get("when") or {}, why=str(row.get("why", ""))) for row in raw
    )


@functools.cache
def load() -> Compat:
    releases_raw = datafiles.raw("releases.yaml")["releases"]
    releases = tuple(
        sorted(
            (
                TorchRelease(
                    version=str(r["version"]),
                    released=str(r["released"]),
                    build=str(r["build"]),
                    platforms={
                        name: PlatformSupport(
                            python=tuple(str(p) for p in support["python"]),
                            cuda=tuple(str(c) for c in support["cuda"]),
                        )
                        for name, support in r["platforms"].items()
                    },
                    cudnn={str(k): int(v) for k, v in (r.get("cudnn") or {}).items()},
                    uncertain=_notes(r.get("uncertain")),
                )
                for r in releases_raw
            ),
            key=lambda r: Version(r.version),
        )
    )
    toolchains = datafiles.raw("toolchains.yaml")
    cuda = {
        str(version): CudaRelease(
            version=str(version),
            cudnn=int(row["cudnn"]),
            msvc=_range(row["msvc"]),
            gcc=_range(row["gcc"]),
            arch_list=str(row["arch_list"]),
            wheel_tag=str(row["wheel_tag"]),
            nvtx=str(row["nvtx"]),
            uncertain=_notes(row.get("uncertain")),
        )
        for version, row in toolchains["cuda"].items()
    }
    visual_studio = tuple(
        sorted(
            (
                VisualStudio(
                    year=int(row["year"]),
                    version=str(row["version"]),
                    toolsets=_range(row["toolsets"]),
                    generator=str(row["generator"]),
                    generator_platform=row.get("platform"),
                )
                for row in toolchains["visual_studio"]
            ),
            key=lambda vs: vs.year,
        )
    )
    known_bad = tuple(
        KnownBadVisualStudio(
            versions=_range(row["visual_studio"]),
            error=str(row["error"]),
            message=str(row["message"]),
            fix=str(row["fix"]),
        )
        for row in toolchains.get("known_bad") or []
    )
    pkg = datafiles.raw("packaging.yaml")
    packaging = Packaging(
        wheel_platform_tags=_rules(pkg["wheel_platform_tags"], "tag"),
        run_dependencies=_rules(pkg["run_dependencies"], "spec"),
        cuda_build_number_offset=int(pkg["cuda_build_number_offset"]),
        cuda_run_constrained=tuple(str(s) for s in pkg["cuda_run_constrained"]),
        github_runners={str(k): str(v) for k, v in pkg["github_runners"].items()},
        solve_channels=tuple(
            SolveChannel(
                channel=str(row["channel"]),
                rule=Rule(value=str(row["channel"]), when=row.get("when") or {}, why=str(row.get("why", ""))),
                absent=tuple(str(a) for a in row.get("absent") or ()),
            )
            for row in pkg.get("solve_channels") or []
        ),
        requirement_overrides=tuple(
            Override(pypi=str(canonicalize_name(str(row["pypi"]))), rule=_rules([row], "spec")[0])
            for row in pkg.get("requirement_overrides") or []
        ),
        unlabelled_wheels=_rules(pkg.get("unlabelled_wheels") or [], "label"),
        undeclared_requirements=_rules(pkg.get("undeclared_requirements") or [], "requirement"),
        broken_scripts=_rules(pkg.get("broken_console_scripts") or [], "script"),
        vc_runtime=tuple(
            (
                Rule(value=str(row["package"]), when=row.get("when") or {}),
                VcRuntimeRule(
                    package=str(row["package"]),
                    minimum=str(row["minimum"]),
                    upper=str(row.get("upper", "")),
                    versions=tuple((str(v["msvc"]), str(v["vc"])) for v in row.get("versions") or ()),
                ),
            )
            for row in pkg.get("vc_runtime") or []
        ),
    )
    provisioning = provisioning_of(toolchains["provision"])
    return Compat(
        releases=releases,
        cuda=cuda,
        visual_studio=visual_studio,
        known_bad=known_bad,
        packaging=packaging,
        provisioning=provisioning,
    )
