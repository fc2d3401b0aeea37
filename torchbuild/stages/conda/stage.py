"""conda: the repaired wheel becomes the cell's conda package (.conda, or .tar.bz2 when asked).

The package is made from the same wheel as the pip artifact, never from a second compile: the wheel is installed
into the Plan's site-packages of a staging prefix, with its console scripts (``.exe`` launchers on Windows), by
installer (wheel/install.py; in memory where there is room for it, scratch.py), its Requires-Dist become conda run
dependencies (conda/requirements.py), and the package is assembled with py-rattler-build (conda/assembly.py) from the
rendered recipe (``torchbuild/recipes/pytorch``), which also goes into ``info/recipe``.

In a conda environment the runtimes come from the environment: the package leaves out every DLL one of its run
dependencies provides (``plan.conda.provided_dlls``: the VC runtime from vc14_runtime, libiomp5md.dll from
intel-openmp, the CUDA libraries from their packages), so that each is loaded once, and depends on a VC runtime at
least as new as the floor the repair read from the binaries (``repair_report``). The wheel keeps its copies: pip has
no such packages.

A cell of the 2018 era also gets that era's names (stages/conda/era.py): ``pytorch-cpu`` assembled from the same
staged payload, the ``cudaXY`` selector metapackage, and ``features: cudaXY`` in its ``pytorch``'s index.json.

The wheel's license files go to ``info/licenses/`` with their relative paths, as conda-build puts them
(conda/licenses.py): a PEP 639 tree in the installed ``.dist-info`` passes MAX_PATH in conda's package cache.
"""

from __future__ import annotations

import shutil
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

from torchbuild.conda import info_files, licenses
from torchbuild.conda.assembly import assemble, build_timestamp, check_options
from torchbuild.conda.requirements import wheel_requires
from torchbuild.errors import StageFailed, UserError, as_stage_failure
from torchbuild.host import scratch
from torchbuild.host.console import console
from torchbuild.knowledge import dll_providers
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.platforms.windows import vc_runtime
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import (
    ERA_PYTORCH,
    ERA_SELECTOR,
    Context,
    Stage,
    companion_artifacts,
    era_artifacts,
    package_artifact,
)
from torchbuild.stages.conda import dependent, era, recipe
from torchbuild.wheel import sbom, wheelfile
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import RepairReport

NAME = "conda"


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def run(ctx: Context) -> StageResult:
    """The package of each package the cell ships, in the Plan's order: torch's from the recipe, each package built
    beside it pinning torch's exact build (dependent.py); what the libraries it uses refuse (a wheel's requirement,
    its members, the assembly) fails the stage with their message."""
    check_options(ctx.options)
    outputs: dict[str, Artifact] = {}
    said: list[str] = []
    try:
        for package in ctx.plan.packages:
            wheel = ctx.inputs.get(package_artifact("repaired_wheel", package))
            if wheel is None and package.is_root:
                raise StageFailed(NAME, "no wheel to package: the repair stage recorded no 'repaired_wheel' output")
            if wheel is None:
                continue  # a package built beside torch that the repair stage left out
            make = _package if package.is_root else dependent.package
            with as_stage_failure(NAME, wheelfile.WheelError):
                archive = wheelfile.open_wheel(wheel.path)  # opened once: what follows reads it from here
            with archive:
                artifact, line, era_made = make(ctx, package, wheel.path, archive)
            outputs[package_artifact("conda_package", package)] = artifact
            outputs.update(era.outputs(era_made))
            said.append(line + era.said(era_made))
    except StageFailed:
        raise
    except UserError as exc:
        raise StageFailed(NAME, str(exc)) from None
    return StageResult(outputs=outputs, message="; ".join(said))


def _package(
    ctx: Context, torch: ShippedPackage, repaired: Path, archive: zipfile.ZipFile
) -> tuple[Artifact, str, dict[str, Path]]:
    """torch's package from its ``repaired`` wheel (``archive``, as the stage opened it), what the stage says of it,
    and the 2018 channel's names made from the same payload (artifact kind -> file)."""
    from torchbuild.wheel.install import install_wheel  # loads installer: only when a package is made

    plan = ctx.plan
    with as_stage_failure(NAME, wheelfile.WheelError):
        wheel = wheelfile.read_wheel(repaired, archive)
    requires = wheel_requires(wheel, plan.conda.requirements)
    report_artifact = ctx.inputs.get("repair_report")
    report = RepairReport.read(report_artifact.path) if report_artifact else None
    source_artifact = ctx.inputs.get("source_info")
    if source_artifact is None:
        raise StageFailed(NAME, "no source_info from the source stage: the package's time and origin are not known")
    source = SourceInfo.read(source_artifact.path)
    vc_spec = vc_runtime_spec(plan, report)
    left_out = dll_providers.provided_members(archive.namelist(), plan.conda.provided_dlls)
    unpacked_size = sum(info.file_size for info in archive.infolist())
    rendered = recipe.render(
        plan,
        ctx.stage_dir("recipe"),
        wheel_path=_relative(wheel.path, ctx.root),
        wheel_requires=requires,
        vc_runtime=vc_spec,
        left_out=sorted(left_out),
    )

    out_dir = ctx.stage_dir(NAME)
    for stale in [*out_dir.glob("*.conda"), *out_dir.glob("*.tar.bz2")]:
        stale.unlink()
    document = package_sbom(plan, torch, wheel.path.name, source, report, left_out)
    info_sbom = out_dir / sbom.FILE_NAME
    info_sbom.write_bytes(document.encode("utf-8"))  # not text mode: Windows would write CRLF (TB109 compares it)
    name = torch.conda.archives[ctx.options.conda_format]
    made: dict[str, Path] = {}  # the 2018 channel's names (stages/conda/era.py)
    with scratch.directory(unpacked_size, out_dir, "torchbuild-conda-payload-") as staging:
        started = time.perf_counter()
        member = sbom.wheel_member(wheel.dist_info)
        replace = {member: document.encode("utf-8")}
        payload = install_wheel(
            archive,
            plan.conda.install_scheme,
            staging,
            windows=plan.platform_module.conda_windows_layout,
            leave_out=left_out,
            replace=replace,
        )
        moved = licenses.take(staging / plan.conda.site_packages, wheel.dist_info, out_dir / "info-licenses")
        unpacked = time.perf_counter() - started
        what = (
            f"assembling {name}: {payload.files:,} files, {payload.size / 1e6:,.0f} MB, "
            f"{'zstd' if ctx.options.conda_format == 'conda' else 'bzip2'} level {ctx.options.compression_level}, "
            f"{ctx.options.compression_threads} thread(s)"
        )
        console.print(f"  {what} ...")
        started = time.perf_counter()
        with console.status(what + " ..."):
            names = {torch.conda.name: rendered.meta}
            if plan.conda.era.cpu_package:  # the same payload under the era's CPU name
                names[ERA_PYTORCH] = era.renamed(rendered.meta, plan.conda.era.cpu_package)
            for kind, meta in names.items():
                made[kind] = assemble(
                    meta,
                    subdir=plan.conda.subdir,
                    payload_dir=staging,
                    out_dir=out_dir,
                    options=ctx.options,
                    recipe_dir=rendered.directory,
                    licenses=moved.top_level(),
                    info_files=[info_sbom],
                    timestamp=build_timestamp(source.epoch),
                )
                # assemble puts each top-level license file at info/licenses/<file name>; the nested ones come here
                index = era.index_fields(plan) if kind == torch.conda.name else {}
                info_files.add(made[kind], moved.nested(), level=ctx.options.compression_level, index=index)
        path = made.pop(torch.conda.name)
        assembled = time.perf_counter() - started
    info_sbom.unlink()
    shutil.rmtree(moved.root)
    if (selector := era.selector_package(plan, out_dir, ctx.options)) is not None:
        made[ERA_SELECTOR] = selector
    if path.name != name:
        raise StageFailed(NAME, f"assembled {path} but the Plan names the package {name}")

    artifact = Artifact.of(path)
    message = (
        f"{name}: {artifact.size / 1e6:.1f} MB from {payload.files:,} files "
        f"(unpack {unpacked:.1f} s{' in memory' if scratch.in_memory_path(staging) else ''}, "
        f"assemble {assembled:.1f} s)"
    )
    if vc_spec:
        message += f"; depends on {vc_spec}"
    if moved.moved:
        message += (
            f"; {moved.moved} license files moved from {wheel.dist_info}/licenses/ to info/licenses/ "
            f"({moved.dropped_fields} License-File fields out of METADATA)"
        )
    if left_out:
        shown = ", ".join(f"{member} ({package})" for member, package in sorted(left_out.items()))
        message += f"; left out, provided by run dependencies: {shown}"
    if payload.scripts:
        message += f"; scripts: {', '.join(payload.scripts)}"
    return artifact, message, made


def package_sbom(
    plan: Plan,
    torch: ShippedPackage,
    wheel_name: str,
    source: SourceInfo,
    report: RepairReport | None,
    left_out: Mapping[str, str],
) -> str:
    """The SBOM of what the package holds: the wheel's vendored files less those left to run dependencies, at
    their paths in the package."""
    vendored = [row for row in (report.vendored if report else ()) if row.path not in left_out]
    name, version = wheel_name.split("-")[:2]
    subject = sbom.Subject(artifact=torch.conda.filename, name=name, version=version, source=source)
    return sbom.build(
        subject, vendored, source.epoch, path_prefix=plan.conda.site_packages + "/",
        requirements=plan.declared_libraries,
    )  # fmt: skip


def vc_runtime_spec(plan: Plan, report: RepairReport | None) -> str | None:
    """The package's VC runtime dependency: the Plan's rule, at least as new as the binaries' floor."""
    rule = plan.conda.vc_runtime
    if rule is None:
        return None
    return vc_runtime.conda_spec(rule, report.vc_runtime_floor if report else None)


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("repaired_wheel", "repair_report", "source_info",
           *companion_artifacts("repaired_wheel", "repair_report", "source_info")),
    writes=("conda_package", *companion_artifacts("conda_package"), *era_artifacts("conda_package")),
    shaped_by=("conda_format", "compression_level", "compression_threads"),
)
