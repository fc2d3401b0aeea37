"""The last step of every repair: the SBOM added and the wheel written in the deterministic form."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild.config.cuda_wheels import RequirementWheel
from torchbuild.wheel import sbom
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import Vendored
from torchbuild.wheel.rewrite import dist_info_of, rewrite


def finish_wheel(
    made: Path, target: Path, vendored: Sequence[Vendored], source: SourceInfo,
    requirements: Sequence[RequirementWheel] = (), files: Mapping[str, bytes] | None = None,
) -> None:  # fmt: skip
    """``made`` as ``target``: its SBOM added (<dist-info>/sboms/, PEP 770) and ``files`` replaced (RECORD kept
    true), written in the deterministic form dated ``source``'s epoch."""
    name, version = target.name.split("-")[:2]
    subject = sbom.Subject(artifact=target.name, name=name, version=version.replace("_", "-"), source=source)
    with zipfile.ZipFile(made) as archive:
        member = sbom.wheel_member(dist_info_of(archive))
    document = sbom.build(subject, vendored, source.epoch, requirements=requirements)
    rewrite(made, target, files={**(files or {}), member: document.encode("utf-8")}, epoch=source.epoch)
