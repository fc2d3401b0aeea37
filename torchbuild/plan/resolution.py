"""Resolution of one Cell into a frozen, fully resolved Plan. Every later stage reads only the Plan.

Invalid cells are refused here, before anything runs, with a message that names the valid choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from torchbuild.conda import solve
from torchbuild.conda.selectors import conda_selectors
from torchbuild.config.build_version import OwnBuild, build_string_label, labelled, own_facts
from torchbuild.config.declared_choice import cell_libraries
from torchbuild.config.matrix import LATEST, Cell, Matrix
from torchbuild.config.support import check_cuda, check_python, resolve_release, supporting
from torchbuild.config.user_tests import UserTest
from torchbuild.errors import UserError
from torchbuild.host.pip import target_args as pip_target_args
from torchbuild.knowledge import (
    build_deps,
    companions,
    cuda_wheels,
    datafiles,
    dll_providers,
    era_names,
    pairing,
    pypi_to_conda,
    smoke_envs,
)
from torchbuild.knowledge.companions import TORCH, upstream_openmp
from torchbuild.knowledge.compat import (
    Compat,
    CudaRelease,
    TorchRelease,
    load,
    notes_for,
    version_key,
)
from torchbuild.plan.model import (
    SOLVE_CHANNEL,
    STAGES,
    STORED_REPODATA,
    Compiled,
    CondaTarget,
    Offered,
    Plan,
    SolveTarget,
    WindowsFacts,
)
from torchbuild.plan.shipped import ShippedPackage, beside, conda_package
from torchbuild.platforms.by_name import platform_module
from torchbuild.platforms.linux.manylinux import accepted_platform_tags
from torchbuild.platforms.target import Platform, Target, Toolchain, common_env
from torchbuild.wheel.wheelfile import WheelTags

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


def stored_overlay(channel: str, subdir: str) -> str:
    """The folder under torchbuild/data with the records of ``channel`` for ``subdir`` that the stored subsets lack,
    or "" where torchbuild stores none."""
    name = f"{STORED_REPODATA}/{channel}"
    found = datafiles.directory(name)
    return name if found is not None and (found / subdir).is_dir() else ""


def unread_checkouts(matrix: Matrix) -> dict[str, pairing.Checkout]:
    """The companions the matrix compiles from a checkout, before the pin step reads their versions (``plan``)."""
    found = {}
    for name, source in matrix.package_sources:
        url = source.git_url or companions.load().packages[name].repository
        where = f"--companion-source {name}={source.source_dir}" if source.source_dir else f"{url}@{source.git_ref}"
        found[name] = pairing.Checkout(origin=where, version=None, source_dir=source.source_dir or "",
                                       git_url=url if source.git_ref else "", git_ref=source.git_ref or "")  # fmt: skip
    return found


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
    compiled: Compiled = None,
) -> Plan:
    """Resolve ``cell``; ``pinned`` fixes the release of a ``latest`` cell without changing the cell's id;
    ``offered``: the companions' releases the pin step took from the indexes (pairing.choose); ``own``: a build of
    the users' own, which keeps its version and takes ``pinned``'s facts; ``compiled``: the companions compiled from
    a checkout, with the version the pin step read from each (None: those the matrix names, versions not read)."""
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
    markers = pypi_to_conda.marker_environment(cell.platform, cell.python)
    declared, vendored, choice = cell_libraries(cell, release.version)
    if declared:  # a compiled wheel then declares them as PyPI's does
        env.update(cuda_wheels.extra_install_requirements(cell.platform, release.version))
    names = pypi_to_conda.load().names
    # The conda packages of the declared requirements (mkl of torch 2.3.x) install their DLLs as the wheels do.
    vc_runtime = pkg.vc_runtime_for(*applies_to)
    installed_by = [*depends, *(pypi_to_conda.conda_name(names, w.name).conda for w in declared)]
    installed_by += [vc_runtime.package] if vc_runtime else []
    conda = CondaTarget(
        subdir=cell.platform,
        site_packages=site_packages,
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
    torch = ShippedPackage(
        name=TORCH,
        release=release.version,
        wheel=wheel,
        conda=conda_package("pytorch", conda_version, build_string, conda_build_number, depends, constrains),
    )
    companions = pairing.choose(
        matrix.packages,
        pairing.Target(platform=cell.platform, python=cell.python, torch_release=release.version,
                       torch_version=version, local_version=local,
                       **pairing.torch_pins(cell.platform, f"pytorch {conda_version} {build_string}", depends)),
        offered=offered,
        compiled=compiled if compiled is not None else unread_checkouts(matrix),
    )  # fmt: skip
    era = pkg.solve_channel_for(cell.platform, release.version, cell.cuda, cell.python)
    solve_channel = era.channel if era else SOLVE_CHANNEL

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
        wheel_tags=wheel_tags,
        prebuilt_unlabelled=unlabelled_build(compat, *applies_to, local),
        packages=(torch, *(beside(c, torch, wheel_tags, version) for c in companions if c.built)),
        conda=conda,
        solve=SolveTarget(
            channel=solve_channel,
            absent=era.absent if era else (),
            virtual_packages=solve.virtual_packages_for(cell.platform, cell.cuda if cuda else None),
            overlay=stored_overlay(solve_channel, cell.platform),
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
        companions=companions,
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
