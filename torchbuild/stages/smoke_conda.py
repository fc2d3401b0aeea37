"""smoke-conda: the conda package in a fresh environment (see smoke.py, which both smoke stages
share). On a host of the cell's platform it runs beside verify and smoke-wheel."""

from __future__ import annotations

from torchbuild.results import StageResult
from torchbuild.stages import Context, Stage, smoke

KIND = "conda"


def run(ctx: Context) -> StageResult:
    return smoke.run(ctx, KIND)


STAGE = Stage(
    name=smoke.stage_name(KIND),
    run=run,
    reads=smoke.reads(KIND),
    beside=("verify", "smoke-wheel"),
    beside_when=smoke.beside_host,
)
