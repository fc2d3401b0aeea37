"""The 2018 channel's names beside a cell's ``pytorch`` (knowledge/era_names.py, data/era_names.yaml), made by the conda
stage from the same staged payload and the same assembly:

- a CPU cell of torch 0.3-1.1: ``pytorch-cpu``, the same package renamed (the real records are renamed builds, not
  metapackages), and ``torchvision-cpu`` beside a built torchvision, pinning ``pytorch-cpu`` at the cell's build;
- a CUDA cell of a selector release (0.4.0-1.0.0): the ``cudaXY`` metapackage (no files, no dependencies,
  ``track_features: cudaXY``), and its ``pytorch`` with ``features: cudaXY`` unless its CUDA is the release's default.

Written as ``conda_package[era:pytorch]``, ``conda_package[era:selector]``, ``conda_package[era:<companion>]``
(stages/__init__.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.conda import info_files
from torchbuild.conda.assembly import assemble, build_timestamp
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.stages import companion_artifact


def index_fields(plan: Plan) -> dict[str, str]:
    """What the cell's ``pytorch`` index.json adds: its ``features`` (a string, as conda's records have it)."""
    features = plan.conda.era.features
    return {"features": " ".join(features)} if features else {}


def renamed(meta: Mapping[str, Any], name: str, depends: Sequence[str] | None = None) -> dict[str, Any]:
    """``meta`` (a rendered recipe or a companion's) with the package named ``name`` (and ``depends`` as its run
    requirements where given)."""
    out = {**meta, "package": {**meta["package"], "name": name}}
    if depends is not None:
        out["requirements"] = {**(meta.get("requirements") or {}), "run": list(depends)}
    return out


def alias_depends(depends: Sequence[str], torch_pin: str, cpu_package: str) -> list[str]:
    """A companion's run requirements with its pin on the cell's ``pytorch`` build moved to the era's CPU name."""
    return [cpu_package + spec.removeprefix("pytorch") if spec == torch_pin else spec for spec in depends]


def selector_package(plan: Plan, out_dir: Path, options: RunOptions) -> Path | None:
    """The cell's ``cudaXY`` metapackage in ``out_dir``, or None where its era has none: the same bytes from every
    cell of its CUDA version and platform (its time is the data's, its text names no Python)."""
    selector = plan.conda.era.selector
    if selector is None:
        return None
    meta = {
        "package": {"name": selector.name, "version": selector.version},
        "build": {"string": selector.build, "number": 0},
        "requirements": {"run": []},
        "about": {
            "home": "https://pytorch.org/",
            "license": "BSD-3-Clause",
            "license_family": "BSD",
            "summary": f"Selects the CUDA {plan.cuda} builds of pytorch (the feature {selector.name}), as the "
            "pytorch channel's metapackage of 2018 did.",
        },
    }
    with tempfile.TemporaryDirectory(prefix="torchbuild-selector-", dir=out_dir) as empty:
        path = assemble(meta, subdir=plan.conda.subdir, payload_dir=Path(empty), out_dir=out_dir / "era",
                        options=options, timestamp=build_timestamp(selector.timestamp))  # fmt: skip
    info_files.add(path, {}, level=options.compression_level, index={"track_features": selector.name})
    return path


def outputs(made: Mapping[str, Path]) -> dict[str, Artifact]:
    """The era's packages (artifact kind -> file) as the stage's outputs."""
    return {companion_artifact("conda_package", kind): Artifact.of(path) for kind, path in made.items()}


def said(made: Mapping[str, Path]) -> str:
    """What the stage's message adds for the era's packages made beside a package: "" where none."""
    return f"; the 2018 channel's names: {', '.join(path.name for path in made.values())}" if made else ""
