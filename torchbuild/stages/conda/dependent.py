"""The conda package of a package the Plan builds beside torch (``ShippedPackage.links_against``: torchvision,
torchaudio), from its repaired wheel, as torch's.

Its run requirements pin the cell's exact pytorch build (``pytorch 2.5.1 py3.11_cpu_0``: version AND build string,
``ShippedPackage.depends``), so that no solve can pair it with another torch; the wheel's own ``torch==X`` becomes that
pin, its other Requires-Dist convert as torch's do (numpy, pillow), and the VC runtime is left to ``vc14_runtime``
at least as new as the floor its binaries set (its repair report), as for torch. The libraries its wheel bundles
(libpng16.dll, jpeg8.dll, libwebp.dll, zlib.dll ...) stay in the package: they are listed in its SBOM.

Writes ``conda_package[<name>]``: ``<ShippedPackage.package>.conda`` (or .tar.bz2) in the conda stage's directory.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

from torchbuild.conda import info_files, licenses
from torchbuild.conda.assembly import assemble, build_timestamp
from torchbuild.conda.requirements import Conversion, wheel_requires
from torchbuild.errors import as_stage_failure
from torchbuild.host import scratch
from torchbuild.knowledge import dll_providers
from torchbuild.plan import ShippedPackage
from torchbuild.platforms.windows import vc_runtime
from torchbuild.results import Artifact
from torchbuild.stages import Context, dependent_source, era_kind, package_artifact
from torchbuild.stages.conda import era
from torchbuild.wheel import provenance, sbom, wheelfile
from torchbuild.wheel.repair_report import RepairReport

NAME = "conda"


def depends_of(
    ctx: Context, shipped: ShippedPackage, wheel: wheelfile.WheelInfo, report: RepairReport | None
) -> list[str]:
    """Its run requirements: the cell's Python and exact pytorch build, the wheel's other Requires-Dist, the VC
    runtime at the floor of its binaries."""
    plan = ctx.plan
    pin = shipped.torch_pin
    conversion = Conversion(
        markers=plan.conda.marker_environment,
        overrides={**plan.conda.requirement_overrides, "torch": pin},
        names=plan.conda.pypi_names,
    )
    rule = plan.conda.vc_runtime
    vc = [vc_runtime.conda_spec(rule, report.vc_runtime_floor if report else None)] if rule else []
    return list(dict.fromkeys([*shipped.conda.depends, *wheel_requires(wheel, conversion), *vc]))


def package(
    ctx: Context, shipped: ShippedPackage, repaired: Path, archive: zipfile.ZipFile
) -> tuple[Artifact, str, dict[str, Path]]:
    """Its package from its ``repaired`` wheel (``archive``, as the stage opened it), what the stage says of it, and
    its package under the 2018 channel's name (artifact kind -> file: torchvision-cpu beside a CPU cell of torch
    0.3-1.1; none elsewhere), made from the same payload."""
    from torchbuild.wheel.install import install_wheel  # loads installer: only when a package is made

    plan = ctx.plan
    with as_stage_failure(NAME, wheelfile.WheelError):
        wheel = wheelfile.read_wheel(repaired, archive)
    report_artifact = ctx.inputs.get(package_artifact("repair_report", shipped))
    report = RepairReport.read(report_artifact.path) if report_artifact else None
    depends = depends_of(ctx, shipped, wheel, report)
    left_out = dll_providers.provided_members(archive.namelist(), plan.conda.provided_dlls)
    unpacked_size = sum(info.file_size for info in archive.infolist())
    source = dependent_source(ctx.inputs, shipped, wheel.path) if shipped.build else provenance.source_info(
        "wheel", f"PyPI {shipped.wheel}", shipped.sha256, "", provenance.wheel_epoch(wheel.path, archive)
    )
    name = shipped.conda.archives[ctx.options.conda_format]
    out_dir = ctx.stage_dir(NAME) / shipped.name
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("*.conda"), *out_dir.glob("*.tar.bz2")]:
        stale.unlink()
    vendored = [row for row in (report.vendored if report else ()) if row.path not in left_out]
    subject = sbom.Subject(artifact=name, name=shipped.name, version=shipped.release or "", source=source)
    info_sbom = out_dir / sbom.FILE_NAME
    document = sbom.build(subject, vendored, source.epoch, path_prefix=plan.conda.site_packages + "/")
    info_sbom.write_bytes(document.encode("utf-8"))  # not text mode: Windows would write CRLF (TB109 compares it)
    meta: dict[str, Any] = {
        "package": {"name": shipped.conda.name, "version": shipped.conda.version},
        "build": {"string": shipped.conda.build_string, "number": shipped.conda.build_number},
        "requirements": {"run": depends},
        "about": {
            "home": shipped.repository or "https://pytorch.org/",
            "license": "BSD-3-Clause",
            "license_family": "BSD",
            "summary": f"{shipped.name} {shipped.release} for pytorch {plan.root.conda.version} "
            f"{plan.root.conda.build_string}, packaged by torchbuild from {shipped.origin}.",
        },
    }
    with scratch.directory(unpacked_size, out_dir, "torchbuild-conda-payload-") as staging:
        replace = {sbom.wheel_member(wheel.dist_info): document.encode("utf-8")}
        payload = install_wheel(
            archive, plan.conda.install_scheme, staging, windows=plan.platform_module.conda_windows_layout,
            leave_out=left_out, replace=replace,
        )
        moved = licenses.take(staging / plan.conda.site_packages, wheel.dist_info, out_dir / "info-licenses")

        def package(recipe: dict[str, Any]) -> Path:
            """One package of the staged payload (the companion, or its 2018 name)."""
            made = assemble(
                recipe,
                subdir=plan.conda.subdir,
                payload_dir=staging,
                out_dir=out_dir,
                options=ctx.options,
                licenses=moved.top_level(),
                info_files=[info_sbom],
                timestamp=build_timestamp(source.epoch),
            )
            info_files.add(made, moved.nested(), level=ctx.options.compression_level)
            return made

        path = package(meta)
        aliases = {}
        if alias_name := plan.conda.era.companions.get(shipped.name):
            pinned = era.alias_depends(depends, shipped.torch_pin, plan.conda.era.cpu_package)
            aliases[era_kind(shipped.name)] = package(era.renamed(meta, alias_name, pinned))
    info_sbom.unlink()
    shutil.rmtree(moved.root)
    artifact = Artifact.of(path)
    line = (
        f"{path.name}: {artifact.size / 1e6:.1f} MB from {payload.files:,} files; depends on {', '.join(depends)}"
        + (f"; left out, provided by run dependencies: {', '.join(sorted(left_out))}" if left_out else "")
    )
    return artifact, line, aliases

