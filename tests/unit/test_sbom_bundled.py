"""A companion's SBOM lists the libraries its upstream wheel bundles under that wheel, which has the companion's own
name, version and file name: the document is the same on every run (it was not: cyclonedx gave one of the two
components a random bom-ref, so the repaired torchvision wheel's bytes changed from run to run)."""

from __future__ import annotations

import json

from torchbuild.wheel import sbom
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import Vendored

WHEEL = "torchvision-0.29.1-cp311-cp311-win_amd64.whl"


def _document() -> str:
    source = SourceInfo("wheel", f"https://files.pythonhosted.org/{WHEEL}", "ab" * 32, "", 1_700_000_000, "test")
    subject = sbom.Subject(artifact=WHEEL, name="torchvision", version="0.29.1", source=source)
    bundled = [
        Vendored(path=f"torchvision/{name}", sha256=f"{i}" * 64, size=10, version=None, provider="bundled",
                 origin=WHEEL, origin_sha256="ab" * 32, origin_name="torchvision", origin_version="0.29.1")
        for i, name in enumerate(("libpng16.dll", "zlib.dll"), start=1)
    ]  # fmt: skip
    return sbom.build(subject, bundled, source.epoch)


def test_a_companions_bundled_libraries_give_the_same_document_on_every_run() -> None:
    first, second = _document(), _document()
    assert first == second
    assert "BomRef." not in first
    assert sbom.schema_problem(first) is None
    document = json.loads(first)
    [upstream] = document["components"]
    assert upstream["bom-ref"] != document["metadata"]["component"]["bom-ref"]
    assert [c["name"] for c in upstream["components"]] == ["torchvision/libpng16.dll", "torchvision/zlib.dll"]
