"""Resolution of one Cell into a frozen, fully resolved Plan. Every later stage reads only the Plan.

Invalid cells are refused here, before anything runs, with a message that names the valid choices.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from torchbuild.conda import solve
from torchbuild.conda.requirements import Conversion
from torchbuild.conda.selectors import conda_selectors
from torchbuild.config import build_deps, cuda_wheels, dll_providers, era_names, pairing, pypi_to_conda, smoke_envs
from torchbuild.config.build_deps import Dependency
from torchbuild.config.build_version import OwnBuild, build_string_label, labelled, own_facts
from torchbuild.config.companions import TORCH, UpstreamOpenMp, upstream_openmp
from torchbuild.config.compat import (
    CPU,
    Compat,
    CudaRelease,
    Rule,
    TorchRelease,
    VcRuntimeRule,
    load,
    notes_for,
    version_key,
)
from torchbuild.config.cuda_wheels import RequirementWheel
from torchbuild.config.declared_choice import Choice, cell_libraries
from torchbuild.config.dll_providers import ProviderData
from torchbuild.config.matrix import LATEST, Cell, Matrix
from torchbuild.config.pypi_to_conda import NameRule
from torchbuild.config.python_embed import Pinned
from torchbuild.config.shipped import ShippedPackage, beside
from torchbuild.config.smoke_envs import Wanted
from torchbuild.config.support import check_cuda, check_python, resolve_release, supporting
from torchbuild.config.user_tests import UserTest
from torchbuild.errors import UserError
from torchbuild.host.pip import target_args as pip_target_args
from torchbuild.platforms.by_name import platform_module
from torchbuild.platforms.linux.manylinux import accepted_platform_tags
from torchbuild.platforms.target import Platform, Target, Toolchain, common_env
from torchbuild.wheel.wheelfile import Expected, WheelTags

STAGES = ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")
SMOKE_STAGES = ("smoke-wheel", "smoke-conda")
SOLVE_CHANNEL = "conda-forge"  # when packaging.yaml's solve_channels names none for the cell
Offered = Mapping[str, pairing.Offered] | None  # companion -> the release the pin step took from the indexes


@dataclass(frozen=True, kw_only=True)
class CondaPackage:
    name: str
    version: str
    build_string: str
    build_number: int
    subdir: str
    site_packages: str
    depends: tuple[str, ...]
    constrains: tuple[str, ...]
    filename: str  # the .conda file
    archives: Mapping[str, str]  # archive format (conda, tar.bz2) -> file name
    requirement_overrides: Mapping[str, str]  # PyPI name -> the conda spec that replaces its converted pin
    marker_environment: Mapping[str, str]  # PEP 508 marker values of the target, for the wheel's Requires-Dist
    install_scheme: Mapping[str, str]  # where a wheel's .data/<key>/ goes in the prefix ({dist}: the wheel's name)
    pypi_names: Mapping[str, NameRule]  # PyPI name -> conda name (torchbuild/data/pypi_to_conda.yaml)
    # The VC runtime dependency (win-64): its version is at least the floor read from the binaries (vc_runtime.py),
    # so the conda stage writes it; it is not in ``depends``.
    vc_runtime: VcRuntimeRule | None = None
    # DLL pattern -> the run dependency that installs it into the environment: the package leaves its copy out.
    provided_dlls: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The 2018 channel's names a cell of that era also publishes (pytorch-cpu, cudaXY) and this build's features
    era: era_names.EraNames = dataclasses.field(default_factory=era_names.EraNames)

    @property
    def requirements(self) -> Conversion:
        """How the wheel's Requires-Dist become this package's run dependencies."""
        return Conversion(markers=self.marker_environment, overrides=self.requirement_overrides, names=self.pypi_names)


@dataclass(frozen=True, kw_only=True)
class SolveTarget:
    """The verify stage's solve: the stored real repodata of the cell's era and the machine it assumes."""

    channel: str  # a channel directory under --repodata (conda-forge; main of 2018 for old win-64 cells)
    absent: tuple[str, ...]  # run dependencies the stored subset has no record of for this era: left out, said so
    virtual_packages: Mapping[str, str]


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
    embeddable_missing: str  # one line: why none is pinned for the cell's Python (config/python_embed.py)
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
    wheel: str  # file name of the cell's wheel
    wheel_tags: WheelTags
    prebuilt_unlabelled: bool  # PyPI's wheel of this build has no local label (win-64 CPU, linux CUDA of its era)
    conda: CondaPackage
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
    # and (win-64 torchvision) the conda package the stages build from that wheel (config/pairing.py)
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
    def packages(self) -> tuple[ShippedPackage, ...]:
        """What the cell ships, torch first, then each package the stages build beside it; every stage runs one code
        path over them (config/shipped.py)."""
        root = ShippedPackage(
            name=TORCH, release=self.torch, wheel=self.wheel, package=self.conda.filename.removesuffix(".conda")
        )
        return (root, *(beside(c, TORCH) for c in self.companions if c.built))

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
            wheel=self.wheel,
        )

    @property
    def pip_target(self) -> list[str]:
        """pip's options that choose this cell's wheels (its accepted platform tags: an older manylinux is retagged)."""
        tags = self.wheel_tags
        return pip_target_args(self.python, tags.abi, tags.accepted_platforms)


# --- the Plan --------------------------------------------------------------------------------------------


def _format_values(plan_cuda: CudaRelease | None, python: str, cudnn: int | None) -> dict[str, str]:
    major, minor = version_key(python)[:2]
    values = {"python": python, "python_next": f"{major}.{minor + 1}", "cudnn": str(cudnn)}
    if plan_cuda is not None:
        values.update(cuda=plan_cuda.version, cuda_major=str(plan_cuda.major), cuda_next=plan_cuda.next_minor)
    return values


@dataclass(frozen=True, kw_only=True)
class Probe:
    """What the pin step asks the package indexes about a cell before its release is chosen: the wheel of its build
    (``<release>+<local_version>``, or the plain release where ``unlabelled``) for its tags."""

    cell_id: str
    platform: str
    cuda: str
    local_version: str
    wheel_tags: WheelTags
    pip_target: list[str]
    unlabelled: bool  # PyPI publishes this build without its local label (win-64 CPU; linux CUDA: see unlabelled_build)


def unlabelled_build(compat: Compat, platform: str, release: str, cuda: str, local: str) -> bool:
    """Whether PyPI publishes the ``local`` build unlabelled: packaging.yaml's rule, or cuda_wheels.yaml's record."""
    rules = compat.packaging.unlabelled_wheels
    return any(r.applies(platform, release, cuda) and r.value == local for r in rules) or cuda_wheels.unlabelled_cuda(
        platform, release, cuda
    )


def user_test(cell: Cell, matrix: Matrix) -> UserTest | None:
    """The cell's own test; ``{project}`` is the folder of matrix.yaml."""
    keys = matrix.user_tests(cell)
    if keys.command is None:
        return None
    project = Path(matrix.path).parent.resolve()
    return UserTest(command=keys.command, requires=keys.requires or (), project=str(project))


def work_dir_of(cell: Cell) -> str:
    """Where every stage of ``cell`` writes, relative to the workspace: ``build/<cell-id>``."""
    return f"build/{cell.id}"


def check_cell(cell: Cell, matrix: Matrix, compat: Compat | None = None) -> list[TorchRelease]:
    """Everything about ``cell`` that is refused before its release is chosen (platform, Python, CUDA, the requested
    release, the toolchain options); the releases that can be its release, newest first (a requested release: that
    one alone)."""
    compat = compat or load()
    platform = platform_module(cell.platform)
    check_python(compat, cell.python)
    cuda = check_cuda(compat, cell.cuda)
    newest = resolve_release(compat, cell)
    _toolchain(platform, Target(compat=compat, release=newest, cuda=cuda, python=cell.python, options=matrix.build))
    cell_libraries(cell, newest.version)  # vendoring is refused where the platform cannot
    if cell.torch != LATEST:
        return [newest]
    return list(reversed(supporting(compat, cell)))


def probe(cell: Cell, release: TorchRelease, compat: Compat | None = None) -> Probe:
    """The pin step's question about ``cell``, with the wheel tags of ``release``'s era."""
    compat = compat or load()
    platform = platform_module(cell.platform)
    cuda = check_cuda(compat, cell.cuda)
    local = cuda.wheel_tag if cuda else "cpu"
    tags = _wheel_tags(cell, release, compat, platform)
    return Probe(
        cell_id=cell.id,
        platform=cell.platform,
        cuda=cell.cuda,
        local_version=local,
        wheel_tags=tags,
        pip_target=pip_target_args(cell.python, tags.abi, tags.accepted_platforms),
        unlabelled=unlabelled_build(compat, cell.platform, release.version, cell.cuda, local),
    )


def _toolchain(platform: Platform, target: Target) -> Toolchain:
    if target.options.generator == "visual-studio" and platform.name != "win-64":
        raise UserError("build.generator 'visual-studio' is for win-64 only; linux-64 builds use Ninja.")
    return platform.toolchain(target)


def _wheel_tags(cell: Cell, release: TorchRelease, compat: Compat, platform: Platform) -> WheelTags:
    rules = compat.packaging.wheel_platform_tags
    platform_tag = next(r.value for r in rules if r.applies(cell.platform, release.version, cell.cuda))
    return WheelTags(
        interpreter="cp" + cell.python.replace(".", ""),
        abi=platform.python_abi_tag(cell.python),
        platform=platform_tag,
        accepted_platforms=accepted_platform_tags(platform_tag),
    )


def resolve(
    cell: Cell,
    matrix: Matrix,
    compat: Compat | None = None,
    pinned: str | None = None,
    offered: Offered = None,
    own: OwnBuild | None = None,
) -> Plan:
    """Resolve ``cell``; ``pinned`` fixes the release of a ``latest`` cell without changing the cell's id;
    ``offered``: the companions' releases the pin step took from the indexes (pairing.choose); ``own``: a build of
    the users' own, which keeps its version and takes ``pinned``'s facts."""
    compat = compat or load()
    platform = platform_module(cell.platform)
    check_python(compat, cell.python)
    cuda = check_cuda(compat, cell.cuda)
    own_notes: list[str] = []
    if own is not None:
        release, own_notes = own_facts(compat, cell, own, pinned)
    else:
        release = resolve_release(compat, cell, pinned)
    options = matrix.build
    target = Target(compat=compat, release=release, cuda=cuda, python=cell.python, options=options)
    toolchain = _toolchain(platform, target)

    cudnn = compat.cudnn_for(release, cell.cuda)
    local = cuda.wheel_tag if cuda else "cpu"
    version = labelled(Version(own.version), local) if own else f"{release.version}+{local}"
    conda_version = Version(version).public
    own_label = build_string_label(version, local)
    env = {**common_env(cuda, version, matrix.build_number, options), **platform.build_env(target, toolchain)}

    pkg = compat.packaging
    applies_to = (cell.platform, release.version, cell.cuda)
    values = _format_values(cuda, cell.python, cudnn)
    depends = tuple(
        rule.value.format(**values)
        for rule in pkg.run_dependencies
        if rule.applies(cell.platform, release.version, cell.cuda)
    )
    if cuda is None:
        build_string = f"py{cell.python}_cpu_{own_label}{matrix.build_number}"
        conda_build_number = matrix.build_number
        constrains: tuple[str, ...] = ()
    else:
        build_string = f"py{cell.python}_cuda{cuda.version}_cudnn{cudnn}_{own_label}{matrix.build_number}"
        conda_build_number = matrix.build_number + pkg.cuda_build_number_offset
        constrains = pkg.cuda_run_constrained
    old_names = era_names.for_cell(release.version, cell.cuda, release.platforms[cell.platform].cuda)
    constrains = (*constrains, *old_names.constrains)
    conda_build_number += old_names.build_number_offset
    site_packages = platform.site_packages(cell.python)
    stem = f"pytorch-{conda_version}-{build_string}"
    markers = pypi_to_conda.marker_environment(cell.platform, cell.python)
    declared, vendored, choice = cell_libraries(cell, release.version)
    if declared:  # a compiled wheel then declares them as PyPI's does
        env.update(cuda_wheels.extra_install_requirements(cell.platform, release.version))
    names = pypi_to_conda.load().names
    # The conda packages of the declared requirements (mkl of torch 2.3.x) install their DLLs as the wheels do.
    vc_runtime = pkg.vc_runtime_for(*applies_to)
    installed_by = [*depends, *(pypi_to_conda.conda_name(names, w.name).conda for w in declared)]
    installed_by += [vc_runtime.package] if vc_runtime else []
    conda = CondaPackage(
        name="pytorch",
        version=conda_version,
        build_string=build_string,
        build_number=conda_build_number,
        subdir=cell.platform,
        site_packages=site_packages,
        depends=depends,
        constrains=constrains,
        filename=f"{stem}.conda",
        archives={"conda": f"{stem}.conda", "tar.bz2": f"{stem}.tar.bz2"},
        requirement_overrides={o.pypi: o.rule.value for o in pkg.requirement_overrides if o.rule.applies(*applies_to)},
        marker_environment=markers,
        install_scheme=pypi_to_conda.install_scheme(cell.platform, site_packages, cell.python),
        pypi_names=names,
        vc_runtime=vc_runtime,
        provided_dlls=dll_providers.conda_provided(installed_by, vendored) if cell.platform == "win-64" else {},
        era=old_names,
    )

    wheel_tags = _wheel_tags(cell, release, compat, platform)
    wheel = f"torch-{version}-{wheel_tags.interpreter}-{wheel_tags.abi}-{wheel_tags.platform}.whl"
    era = pkg.solve_channel_for(cell.platform, release.version, cell.cuda, cell.python)

    work_dir = work_dir_of(cell)
    notes = list(own_notes)
    if release_note := notes_for(release.uncertain, cell.platform):
        notes.append(f"torch {release.version}: {release_note}")
    if cuda is not None and (cuda_note := notes_for(cuda.uncertain, cell.platform)):
        notes.append(f"CUDA {cuda.version}: {cuda_note}")
    if declared and cell.platform == "linux-64" and cell.python != cuda_wheels.MEASURED_PYTHON:
        notes.append(f"torch {release.version}: CUDA requirements as the cp311 wheel's record (cuda_wheels.yaml)")
    return Plan(
        cell_id=cell.id,
        platform=cell.platform,
        cuda=cell.cuda,
        cudnn=cudnn,
        python=cell.python,
        torch=release.version,
        torch_requested=cell.torch,
        version=version,
        local_version=local,
        build_number=matrix.build_number,
        build_kind=release.build,
        toolchain=toolchain,
        env=dict(sorted(env.items())),
        wheel=wheel,
        wheel_tags=wheel_tags,
        prebuilt_unlabelled=unlabelled_build(compat, *applies_to, local),
        conda=conda,
        solve=SolveTarget(
            channel=era.channel if era else SOLVE_CHANNEL,
            absent=era.absent if era else (),
            virtual_packages=solve.virtual_packages_for(cell.platform, cell.cuda if cuda else None),
        ),
        selectors=conda_selectors(cell.platform, cell.python, cell.cuda, cudnn),
        channel=matrix.channel,
        work_dir=work_dir,
        stage_dirs={stage: f"{work_dir}/{stage}" for stage in (*STAGES, "recipe", "logs")},
        notes=tuple(notes),
        windows=_windows_facts(cell, release, toolchain, cudnn),
        build_timeout_hours=options.timeout_hours,
        build_deps=build_deps.declared(cell.platform, release.version, cell.cuda),
        compiler_cache=options.compiler_cache,
        smoke_extras=smoke_envs.wanted(cell.platform, release.version, cell.cuda, cell.python, under_wine=False),
        companions=pairing.choose(
            matrix.packages,
            pairing.Target(platform=cell.platform, python=cell.python, torch_release=release.version,
                           torch_version=version, local_version=local,
                           **pairing.torch_pins(cell.platform, f"pytorch {conda_version} {build_string}", depends)),
            offered=offered,
        ),
        declared_libraries=declared,
        vendored_libraries=vendored,
        declared_choice=choice,
        upstream_openmp=upstream_openmp(cell.platform, release.version),
        added_requirements=pkg.undeclared_for(*applies_to, cell.python),
        broken_scripts=pkg.broken_scripts_for(*applies_to),
        own_build=own,
        user_test=user_test(cell, matrix),
    )


def _windows_facts(cell: Cell, release: TorchRelease, toolchain: Toolchain, cudnn: int | None) -> WindowsFacts | None:
    if cell.platform != "win-64":
        return None
    return WindowsFacts(
        redistributable_dlls=dll_providers.redistributable_dlls(
            cell.platform, toolchain.msvc_toolset, cell.cuda, cudnn
        ),
        loaded_by_name=dll_providers.loaded_by_name(cell.platform, cell.cuda, cudnn),
        smoke_extras_wine=smoke_envs.wanted(cell.platform, release.version, cell.cuda, cell.python, under_wine=True),
        **dll_providers.windows_facts(cell.platform, cell.cuda, cell.python),
    )

