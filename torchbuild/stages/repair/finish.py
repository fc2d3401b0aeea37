"""The last step of every repair: the SBOM added and the wheel written in the deterministic form; and what every
package's repair beside torch (dependent_pe.py, dependent_elf.py) ends with."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from torchbuild.errors import StageFailed
from torchbuild.host import archives
from torchbuild.knowledge.companions import WHERE
from torchbuild.knowledge.cuda_wheels import RequirementWheel
from torchbuild.plan import ShippedPackage
from torchbuild.results import Artifact, Check
from torchbuild.stages import package_artifact
from torchbuild.wheel import sbom
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import RepairReport, Vendored
from torchbuild.wheel.rewrite import dist_info_of, rewrite

NAME = "repair"
# One package's repair beside torch's repaired wheel: its outputs, checks and one line for the stage's message
RepairBeside = Callable[[ShippedPackage, Path], tuple[dict[str, Artifact], list[Check], str]]
BUNDLED_BY = "upstream wheel"  # Vendored.provider of a library a companion's own wheel ships


def finish_wheel(
    made: Path, target: Path, vendored: Sequence[Vendored], source: SourceInfo,
    requirements: Sequence[RequirementWheel] = (), files: Mapping[str, bytes] | None = None,
    renames: Mapping[str, str] | None = None,
) -> None:  # fmt: skip
    """``made`` as ``target``: its SBOM added (<dist-info>/sboms/, PEP 770), ``files`` replaced and the members
    ``renames`` names renamed (RECORD kept true), written in the deterministic form dated ``source``'s epoch."""
    name, version = target.name.split("-")[:2]
    subject = sbom.Subject(artifact=target.name, name=name, version=version.replace("_", "-"), source=source)
    with archives.open_zip(made) as archive:
        member = sbom.wheel_member(dist_info_of(archive))
    document = sbom.build(subject, vendored, source.epoch, requirements=requirements)
    moved = dict(renames or {})
    rewrite(made, target, files={**(files or {}), member: document.encode("utf-8")}, epoch=source.epoch,
            rename=lambda name: moved.get(name, name))  # fmt: skip


def bundled_by(shipped: ShippedPackage) -> str:
    """Who put the libraries a package's own wheel bundles there, for the stage's line."""
    return "its compiled wheel" if shipped.build else f"PyPI's wheel ({WHERE} pins its sha256)"


def bundled_row(shipped: ShippedPackage, member: str, data: bytes, version: str | None = None) -> Vendored:
    """A library ``shipped``'s own wheel ships (``member``, its bytes), as an SBOM row."""
    return Vendored(
        path=member,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        version=version,
        provider=BUNDLED_BY,
        origin=shipped.wheel,
        origin_sha256=shipped.sha256,
        origin_name=shipped.name,
        origin_version=shipped.release or "",
    )


def package_outputs(
    shipped: ShippedPackage, target: Path, checks: Sequence[Check], report: RepairReport, failure: str
) -> dict[str, Artifact]:
    """A companion's repaired ``target`` and its ``report`` (repair-<name>.json beside it) as the stage's outputs; a
    failed check fails the stage instead, ``target`` removed (``failure``: what the wheel then is not)."""
    failed = [c for c in checks if c.status == "failed"]
    if failed:
        target.unlink()
        problems = "; ".join(c.message for c in failed[:8])
        raise StageFailed(NAME, f"the repaired {target.name} {failure}: {problems}", checks)
    report_path = target.parent / f"repair-{shipped.name}.json"
    report.write(report_path)
    return {
        package_artifact("repaired_wheel", shipped): Artifact.of(target),
        package_artifact("repair_report", shipped): Artifact.of(report_path),
    }
