"""smoke-wheel: the repaired wheel in a fresh environment (stages/smoke/, which both smoke stages share,
says how). It runs beside conda and verify."""

from __future__ import annotations

from torchbuild.stages.smoke import stage as smoke

STAGE = smoke.stage("wheel", beside=('conda', 'verify'))
run = STAGE.run
