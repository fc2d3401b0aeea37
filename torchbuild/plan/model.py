"""The Plan of one cell and the frozen facts it is made of (the packages it ships, plan/shipped.py; CondaTarget,
SolveTarget, WindowsFacts): what every stage reads. plan/resolution.py resolves a Cell into one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.conda.requirements import Conversion
from torchbuild.config.build_version import OwnBuild
from torchbuild.config.declared_choice import Choice
from torchbuild.config.user_tests import UserTest
from torchbuild.host.pip import target_args as pip_target_args
from torchbuild.knowledge import datafiles, era_names, pairing
from torchbuild.knowledge.build_deps import Dependency
from torchbuild.knowledge.companions import UpstreamOpenMp
from torchbuild.knowledge.compat import (
    CPU,
    Rule,
    VcRuntimeRule,
)
from torchbuild.knowledge.cuda_wheels import RequirementWheel
from torchbuild.knowledge.dll_providers import ProviderData
from torchbuild.knowledge.pypi_to_conda import NameRule
from torchbuild.knowledge.python_embed import Pinned
from torchbuild.knowledge.smoke_envs import Wanted
from torchbuild.plan.shipped import ShippedPackage
from torchbuild.platforms.by_name import platform_module
from torchbuild.platforms.target import Platform, Toolchain
from torchbuild.wheel.wheelfile import Expected, WheelTags

STAGES = ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")
SMOKE_STAGES = ("smoke-wheel", "smoke-conda")
SOLVE_CHANNEL = "conda-forge"  # when packaging.yaml's solve_channels names none for the cell
STORED_REPODATA = "repodata"  # torchbuild/data/repodata/<channel>/<subdir>: what the stored subsets lack (solve)
Offered = Mapping[str, pairing.Offered] | None  # companion -> the release the pin step took from the indexes
Compiled = Mapping[str, pairing.Checkout] | None  # companion -> its checkout, as the pin step read it


@dataclass(frozen=True, kw_only=True)
class CondaTarget:
    """The conda environment every package of the cell is made for (each package's own name, version, build and file
    are its CondaPackage, plan/shipped.py)."""

    subdir: str
    site_packages: str
    requirement_overrides: Mapping[str, str]  # PyPI name -> the conda spec that replaces its converted pin
    marker_environment: Mapping[str, str]  # PEP 508 marker values of the target, for the wheel's Requires-Dist
    install_scheme: Mapping[str, str]  # where a wheel's .data/<key>/ goes in the prefix ({dist}: the wheel's name)
    pypi_names: Mapping[str, NameRule]  # PyPI name -> conda name (torchbuild/data/pypi_to_conda.yaml)
    # The VC runtime dependency (win-64): its version is at least the floor read from the binaries (vc_runtime.py),
    # so the conda stage writes it; it is not in a package's ``depends``.
    vc_runtime: VcRuntimeRule | None = None
    # DLL pattern -> the run dependency that installs it into the environment: the package leaves its copy out.
    provided_dlls: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The 2018 channel's names a cell of that era also publishes (pytorch-cpu, cudaXY) and this build's features
    era: era_names.EraNames = dataclasses.field(default_factory=era_names.EraNames)

    @property
    def requirements(self) -> Conversion:
        """How a wheel's Requires-Dist become its package's run dependencies."""
        return Conversion(markers=self.marker_environment, overrides=self.requirement_overrides, names=self.pypi_names)


@dataclass(frozen=True, kw_only=True)
class SolveTarget:
    """The verify stage's solve: the stored real repodata of the cell's era and the machine it assumes."""

    channel: str  # a channel directory under --repodata (conda-forge; main of 2018 for old win-64 cells)
    absent: tuple[str, ...]  # run dependencies the stored subset has no record of for this era: left out, said so
    virtual_packages: Mapping[str, str]
    # The records of ``channel`` the stored subsets lack (the CUDA libraries PyPI's CUDA wheels pin) that torchbuild
    # stores for the cell's subdir, torchbuild/data/<overlay> (its README.md): searched first; "" where it has none
    overlay: str = ""

    @property
    def overlay_channel(self) -> Path | None:
        """The folder of ``overlay`` in this installation of torchbuild, or None where there is none."""
        return datafiles.directory(self.overlay) if self.overlay else None


@dataclass(frozen=True, kw_only=True)
class WindowsFacts:
    """What only a win-64 cell has. The DLL names its binaries may take from redistributables (the repair vendors
    those the wheel imports), and (loader, what it loads by name at run time) for the DLLs no import table names; the
    providers of redistributable DLLs (dll_providers.yaml, its unsigned rows for this cell), the package directories
    on the DLL search path, the driver's DLLs; python.org's embeddable CPython that runs the cell's artifacts under
    Wine (or why none is pinned for its Python), and what the smoke environments get there (smoke_envs.yaml)."""

    redistributable_dlls: tuple[str, ...]
    loaded_by_name: tuple[tuple[str, tuple[str, ...]], ...]
    dll_providers: ProviderData
    dll_search_dirs: tuple[str, ...]
    driver_dlls: tuple[str, ...]
    embeddable: Pinned | None
    embeddable_missing: str  # one line: why none is pinned for the cell's Python (knowledge/python_embed.py)
    smoke_extras_wine: tuple[Wanted, ...]


@dataclass(frozen=True, kw_only=True)
class Plan:
    cell_id: str
    platform: str
    cuda: str  # "cpu" or X.Y
    cudnn: int | None
    python: str
    torch: str  # the resolved release, e.g. "2.5.1"
    torch_requested: str  # "latest" or a version
    version: str  # the wheel's version with local tag: 2.5.1+cu124
    local_version: str  # cpu | cu124
    build_number: int
    build_kind: str  # setup-py | pip-wheel: how a source checkout becomes a wheel
    toolchain: Toolchain
    env: Mapping[str, str]
    wheel_tags: WheelTags
    prebuilt_unlabelled: bool  # PyPI's wheel of this build has no local label (win-64 CPU, linux CUDA of its era)
    # What the cell ships, torch (the root) first, then each package the stages build beside it: every stage runs one
    # code path over them (plan/shipped.py)
    packages: tuple[ShippedPackage, ...]
    conda: CondaTarget
    solve: SolveTarget
    selectors: Mapping[str, bool | int | str]  # conda-build's selector names for this cell's recipe
    channel: str
    work_dir: str  # build/<cell-id>; every stage writes below it
    stage_dirs: Mapping[str, str]
    notes: tuple[str, ...]  # uncertain facts the resolution relied on
    windows: WindowsFacts | None = None  # win-64 cells only
    build_timeout_hours: float = 6.0  # matrix build.timeout_hours: the compile is stopped after this
    build_deps: tuple[Dependency, ...] = ()  # downloaded for a compile (MKL, ...; data/build_deps.yaml)
    compiler_cache: str = "none"  # matrix build.compiler_cache: sccache, clcache or none
    # What the smoke environments get besides the artifact and its requirements (smoke_envs.yaml) on a host of the
    # cell's platform (under Wine: WindowsFacts.smoke_extras_wine)
    smoke_extras: tuple[Wanted, ...] = ()
    # torchvision / torchaudio beside torch: the release and PyPI wheel chosen for this target, or why none ships,
    # and (win-64 torchvision) the conda package the stages build from that wheel (knowledge/pairing.py); those the
    # stages build are entries of ``packages``
    companions: tuple[pairing.Companion, ...] = ()
    # The declared requirements whose wheels provide libraries the wheel loads (cuda_wheels.yaml: PyPI's linux CUDA
    # builds' nvidia-*, mkl of torch 2.3.x on win-64), for the target, exact versions: the repair leaves them there
    declared_libraries: tuple[RequirementWheel, ...] = ()
    # Those the cell vendors instead (matrix.yaml declared_libraries: vendor): the repair puts their libraries into the
    # wheel and drops the requirement; the conda package then needs no package for them either
    vendored_libraries: tuple[RequirementWheel, ...] = ()
    declared_choice: Choice = dataclasses.field(default_factory=lambda: Choice(choice="keep", upstream="keep"))
    # The OpenMP runtimes upstream's own wheels of the release load together where that is more than one
    # (companions.yaml upstream_openmp): the repair and verify pass exactly that set for exactly those wheels
    upstream_openmp: UpstreamOpenMp | None = None
    # Requirements torch imports but its wheel lacks (packaging.yaml undeclared_requirements): the repair adds them
    added_requirements: tuple[Rule, ...] = ()
    # Console scripts upstream's wheel declares but cannot start (packaging.yaml broken_console_scripts)
    broken_scripts: tuple[Rule, ...] = ()
    # A build of the users' own (a source build, nightly, pre-release, fork): its version as built, whose facts
    # ``torch`` names, and why (config/build_version.py); None for upstream's release builds
    own_build: OwnBuild | None = None
    # matrix.yaml's test_command and test_requires of this cell (an include entry's over the top level's): run in
    # both smoke environments after the built-in checks; None where the cell has no test_command
    user_test: UserTest | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @property
    def platform_module(self) -> Platform:
        """What the cell's platform decides for every stage (platforms/target.py), by its name."""
        return platform_module(self.platform)

    @property
    def is_cuda(self) -> bool:
        return self.cuda != CPU

    @property
    def root(self) -> ShippedPackage:
        """The package the others link against: torch, whose wheel the cell's source and build stages make."""
        return next(p for p in self.packages if p.is_root)

    @property
    def dependents(self) -> tuple[ShippedPackage, ...]:
        """The packages built beside torch (``packages`` less torch): each links against it."""
        return tuple(p for p in self.packages if not p.is_root)

    @property
    def unlabelled_version(self) -> str | None:
        """The version of an input wheel that carries no local label and is given the Plan's (``version``): PyPI's
        unlabelled wheel of a release build, or an own build's wheel built without one; None where there is none."""
        if self.own_build is not None:
            return self.own_build.version if self.own_build.version != self.version else None
        return self.torch if self.prebuilt_unlabelled else None

    def expected_wheel(self, version: str | None = None) -> Expected:
        """What an input wheel of this cell must be; ``version`` replaces the Plan's (PyPI's unlabelled wheel of the
        Plan's build carries the plain release version)."""
        return Expected(
            version=version or self.version,
            tags=self.wheel_tags,
            platform=self.platform,
            cell_id=self.cell_id,
            wheel=self.root.wheel,
        )

    @property
    def pip_target(self) -> list[str]:
        """pip's options that choose this cell's wheels (its accepted platform tags: an older manylinux is retagged)."""
        tags = self.wheel_tags
        return pip_target_args(self.python, tags.abi, tags.accepted_platforms)
