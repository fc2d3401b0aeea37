"""The SBOM lists the libraries a wheel leaves to its declared requirements as torch's required dependencies (the
real Plan of the linux CUDA 12.8 cell: PyPI's nvidia-* wheels with their sha256), valid CycloneDX 1.6, and the
artifact's file check does not take them for files of the artifact."""

from __future__ import annotations

import json

from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.plan import resolve
from torchbuild.wheel import sbom
from torchbuild.wheel.provenance import SourceInfo


def test_declared_requirements_are_required_dependencies_of_torch() -> None:
    cell = Cell(platform="linux-64", cuda="12.8", python="3.11", torch="2.10.0")
    plan = resolve(cell, matrix.parse("build:\n  max_jobs: 8\n", "m.yaml"))
    source = SourceInfo("wheel", "https://files.pythonhosted.org/torch.whl", "ab" * 32, "", 1_700_000_000, "test")
    subject = sbom.Subject(artifact=plan.root.wheel, name="torch", version=plan.version, source=source)
    text = sbom.build(subject, [], source.epoch, requirements=plan.declared_libraries)
    assert sbom.schema_problem(text) is None
    document = json.loads(text)
    runtime = next(c for c in document["components"] if c["name"] == "nvidia-cuda-runtime-cu12")
    assert runtime["scope"] == "required"
    assert runtime["purl"].startswith("pkg:pypi/nvidia-cuda-runtime-cu12@12.8.90?file_name=nvidia_cuda_runtime_cu12-")
    assert runtime["hashes"] == [{"alg": "SHA-256", "content": plan.declared_libraries[1].sha256}]
    props = {p["name"]: p["value"] for p in runtime["properties"]}
    assert props["torchbuild:libraries"] == "nvidia/cuda_runtime/lib/libcudart.so.12"
    assert props["torchbuild:declared_by"].startswith("nvidia-cuda-runtime-cu12==12.8.90;")
    torch_ref = document["metadata"]["component"]["bom-ref"]
    [edges] = [d for d in document["dependencies"] if d["ref"] == torch_ref]
    assert runtime["bom-ref"] in edges["dependsOn"] and len(edges["dependsOn"]) == 15
    rows = [r for r in sbom.rows(document) if r.component == "nvidia-cuda-runtime-cu12"]
    assert [r.origin.startswith("required: nvidia-cuda-runtime-cu12==12.8.90") for r in rows] == [True]
    assert sbom.problems(text, {}) == []  # nothing listed as a file of the artifact
