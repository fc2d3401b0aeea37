"""build: compile the cell's wheel. Prebuilt mode only for now: the source stage's wheel passes through.

Compiling from a checkout (setup.py bdist_wheel / pip wheel with the Plan's toolchain and environment) lands later.
Output: ``wheel``.
"""

from __future__ import annotations

from torchbuild.errors import StageFailed
from torchbuild.stages import Context, StageResult

STAGE = "build"


def run(ctx: Context) -> StageResult:
    wheel = ctx.inputs.get("wheel")
    if wheel is None:
        raise StageFailed(STAGE, "no wheel from the source stage (its output 'wheel' is missing)")
    return StageResult(status="skipped", outputs={"wheel": wheel}, message="prebuilt wheel: nothing to compile")
