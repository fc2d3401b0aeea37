"""The stages of one cell: source -> build -> repair -> conda -> verify -> smoke-wheel, smoke-conda -> publish.

Each stage module ends with one ``STAGE = Stage(...)`` that declares what it reads and writes by name (the
artifact names below) and which run options shape its output. The runner gives a stage only the Plan, the run
options and the artifacts it declared it reads; a stage reads nothing else, and the stages never import each other
(the two smoke stages share ``stages/smoke/``, which is no stage of its own).

Each package the cell ships (``Plan.packages``: torch, then those built beside it, plan/shipped.py) goes through
the same stages; torch's artifacts carry the plain names, every other package's its name,
``<torch's artifact>[<package>]``: ``source_wheel[torchvision]``, ``repaired_wheel[torchvision]``,
``repair_report[torchvision]``, ``conda_package[torchvision]``. The 2018 channel's names a cell of that era adds
(stages/conda/era.py) are ``conda_package[era:pytorch]`` (pytorch-cpu), ``conda_package[era:selector]`` (cudaXY) and
``conda_package[era:<companion>]`` (torchvision-cpu). A stage declares each kind for every package, and apart from
those for every 2018 name (``repaired_wheel[*]``, ``conda_package[era:*]``), so that no declaration depends on what
the Plan or the data say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from torchbuild.config.options import RunOptions
from torchbuild.knowledge import era_names as era_names
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.results import Artifact, StageResult
from torchbuild.wheel import provenance
from torchbuild.wheel.provenance import SourceInfo


@dataclass(frozen=True)
class Context:
    plan: Plan
    root: Path  # the workspace: plan.work_dir and the channel are relative to it
    options: RunOptions
    inputs: Mapping[str, Artifact] = field(default_factory=dict)

    def stage_dir(self, stage: str) -> Path:
        path = self.root / self.plan.stage_dirs[stage]
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def channel_dir(self) -> Path:
        return self.root / self.plan.channel


@dataclass(frozen=True)
class Stage:
    """A stage and its contract with the runner."""

    name: str
    run: Callable[[Context], StageResult]
    reads: tuple[str, ...] = ()  # artifact names of earlier stages; the stage gets those that exist
    writes: tuple[str, ...] = ()  # every name it may put in StageResult.outputs
    shaped_by: tuple[str, ...] = ()  # RunOptions fields that change its output (they are part of its rerun key)
    # When it runs even though its inputs did not change: publishing re-checks the channel every time; a checkout
    # (torch's, or a package's the Plan compiles) can change without its path changing.
    always_runs: Callable[[RunOptions, Plan], bool] = lambda options, plan: False
    # Earlier stages it does not wait for: it starts as soon as every other earlier stage is done and may run while
    # these do. It must read nothing they write (the runner checks).
    beside: tuple[str, ...] = ()
    # Its outputs are byte copies of what it reads (publish): a rerun of the same inputs cannot make other bytes, so
    # the runner does not fingerprint them first for the reproducibility note (reading a wheel's directory costs).
    copies_inputs: bool = False


EVERY_PACKAGE = "*"


def dependent_source(inputs: Mapping[str, Artifact], shipped: ShippedPackage, wheel: Path) -> SourceInfo:
    """Where a package beside torch comes from, and the time its artifacts carry: its checkout (the source stage's
    ``source_info[<name>]``) for one the Plan compiles, else PyPI's wheel, pinned by sha256."""
    recorded = inputs.get(package_artifact("source_info", shipped)) if shipped.build else None
    if recorded is not None:
        return SourceInfo.read(recorded.path)
    return provenance.source_info("wheel", f"PyPI {shipped.wheel}", shipped.sha256, "", provenance.wheel_epoch(wheel))


def companion_artifact(kind: str, name: str) -> str:
    """The artifact name of a companion's ``kind`` (``repaired_wheel``) artifact: ``repaired_wheel[torchvision]``."""
    return f"{kind}[{name}]"


def package_artifact(kind: str, package: ShippedPackage) -> str:
    """The artifact name of ``package``'s ``kind`` artifact: ``repaired_wheel`` for torch (the root),
    ``repaired_wheel[torchvision]`` for a package built beside it."""
    return kind if package.is_root else companion_artifact(kind, package.name)


def companion_artifacts(*kinds: str) -> tuple[str, ...]:
    """A stage's declaration of each of ``kinds`` for every package built beside torch, whichever the Plan ships:
    ``repaired_wheel[*]`` (``declares``)."""
    return tuple(companion_artifact(kind, EVERY_PACKAGE) for kind in kinds)


def declares(declared: Sequence[str], name: str) -> bool:
    """Whether a stage's ``declared`` names (what it reads or writes) cover the artifact ``name``: ``name`` itself,
    or its kind for every package built beside torch (``repaired_wheel[*]`` covers ``repaired_wheel[torchvision]``),
    or, for a 2018 name, its kind for every such name (``conda_package[era:*]`` covers ``conda_package[era:pytorch]``;
    ``[*]`` does not)."""
    if name in declared:
        return True
    kind, _, package = name.partition("[")
    if not package:
        return False
    every = EVERY_ERA_NAME if package.startswith(ERA) else EVERY_PACKAGE
    return companion_artifact(kind, every) in declared


# What a cell's artifact is in a channel, by its kind: torch's, each package's beside it (conda_package[torchvision])
# and the 2018 names' (conda_package[era:pytorch]) alike. The publish stage and ``pipeline.py publish`` (a report's
# artifacts) publish exactly these.
PUBLISHED: Mapping[str, Literal["conda", "wheel"]] = {"conda_package": "conda", "repaired_wheel": "wheel"}


def published_kind(name: str) -> Literal["conda", "wheel"] | None:
    """What the artifact ``name`` is in a channel (a conda package or a wheel), or None where it is not published
    (a build log, a repair report, a published file's record)."""
    return PUBLISHED.get(name.partition("[")[0])


ERA = "era:"
ERA_PYTORCH, ERA_SELECTOR = f"{ERA}pytorch", f"{ERA}selector"
EVERY_ERA_NAME = f"{ERA}*"


def era_kind(companion: str) -> str:
    """The era artifact of a companion under its 2018 name: ``era:torchvision`` (torchvision-cpu)."""
    return f"{ERA}{companion}"


def era_artifacts(kind: str) -> tuple[str, ...]:
    """A stage's declaration of ``kind`` (conda_package, published_conda) under every 2018 name a cell of that era
    adds (pytorch-cpu, cudaXY, torchvision-cpu): ``conda_package[era:*]`` (``declares``)."""
    return (companion_artifact(kind, EVERY_ERA_NAME),)


def is_era_artifact(name: str) -> bool:
    """Whether the artifact ``name`` is a package under a 2018 name (``conda_package[era:pytorch]``)."""
    return f"[{ERA}" in name
