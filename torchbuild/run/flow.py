"""The declared stage flow: every stage's declaration in the order the stages run, what each waits for, and the
check, before anything runs, that each reads only what an earlier stage writes (run/runner.py runs it)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.plan import STAGES
from torchbuild.stages import Stage, declares, publish, smoke_conda, smoke_wheel, source
from torchbuild.stages.build import stage as build
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.verify import stage as verify

# Every stage's module, in the order the stages run (plan.STAGES names them).
MODULES = (source, build, repair, conda, verify, smoke_wheel, smoke_conda, publish)


def pipeline() -> tuple[Stage, ...]:
    """Every stage's declaration, in order."""
    declared = tuple(module.STAGE for module in MODULES)
    assert tuple(stage.name for stage in declared) == STAGES, "flow.MODULES and plan.STAGES disagree"
    return declared


def declared_in(stage: str) -> str:
    """The file that declares ``stage``, for messages about its declaration."""
    module = next((m for m in MODULES if m.STAGE.name == stage), None)
    if module is None or module.__file__ is None:
        return "torchbuild/stages"
    path = Path(module.__file__)
    return "/".join(path.parts[path.parts.index("torchbuild"):]) if "torchbuild" in path.parts else str(path)


def check_flow(stages: Sequence[Stage]) -> None:
    """Refuse a stage that reads an artifact no earlier stage declares it writes, one beside a stage that is not
    earlier than it, and one that reads what a stage it runs beside writes."""
    written: list[str] = []
    for index, stage in enumerate(stages):
        unknown = [name for name in stage.reads if not declares(written, name)]
        if unknown:
            earlier = ", ".join(written) or "nothing"
            raise UserError(
                f"stage '{stage.name}' reads {', '.join(unknown)}, which no earlier stage writes (written before it: "
                f"{earlier}). Fix the stage's declaration in {declared_in(stage.name)}."
            )
        earlier_stages = {s.name: s for s in stages[:index]}
        for other in stage.beside:
            if other not in earlier_stages:
                raise UserError(
                    f"stage '{stage.name}' runs beside '{other}', which is not a stage before it (before it: "
                    f"{', '.join(earlier_stages) or 'none'}). Fix the stage's declaration in "
                    f"{declared_in(stage.name)}."
                )
            clash = sorted(name for name in stage.reads if declares(earlier_stages[other].writes, name))
            if clash:
                raise UserError(
                    f"stage '{stage.name}' runs beside '{other}' but reads {', '.join(clash)}, which '{other}' "
                    f"writes. Fix the stage's declaration in {declared_in(stage.name)}."
                )
        written += [name for name in stage.writes if name not in written]


def waits_for(stages: Sequence[Stage]) -> dict[str, tuple[str, ...]]:
    """For each stage, the earlier stages it starts after: all of them, less those it runs beside."""
    waits: dict[str, tuple[str, ...]] = {}
    for index, stage in enumerate(stages):
        beside = set(stage.beside)
        waits[stage.name] = tuple(s.name for s in stages[:index] if s.name not in beside)
    return waits
