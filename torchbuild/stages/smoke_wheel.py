"""smoke-wheel: the repaired wheel in a fresh environment (see smoke.py, which both smoke stages
share). On a host of the cell's platform it runs beside conda and verify."""

from __future__ import annotations

from torchbuild.results import StageResult
from torchbuild.stages import Context, Stage, smoke

KIND = "wheel"


def run(ctx: Context) -> StageResult:
    return smoke.run(ctx, KIND)


STAGE = Stage(
    name=smoke.stage_name(KIND),
    run=run,
    reads=smoke.reads(KIND),
    beside=("conda", "verify"),
    beside_when=smoke.beside_host,
)
