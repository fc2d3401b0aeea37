"""smoke-conda: the conda package in a fresh environment (stages/smoke/, which both smoke stages share,
says how). It runs beside verify and smoke-wheel."""

from __future__ import annotations

from torchbuild.stages.smoke import stage as smoke

STAGE = smoke.stage("conda", beside=('verify', 'smoke-wheel'))
run = STAGE.run
