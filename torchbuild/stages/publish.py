"""publish: the cell's conda package and wheel into the channel (the local directory by default; s3:// and
anaconda:// too, see torchbuild/channels). Artifacts built elsewhere are published with ``pipeline.py publish``."""

from __future__ import annotations

from torchbuild.channels.backends import open_channel
from torchbuild.errors import StageFailed, UserError
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context, Stage, companion_artifacts, era_artifacts, is_era_artifact, package_artifact

NAME = "publish"


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    try:
        conda, wheel = ctx.inputs["conda_package"], ctx.inputs["repaired_wheel"]
    except KeyError as missing:
        raise StageFailed(NAME, f"no {missing} artifact from the earlier stages to publish") from None
    # The companions built beside torch (win-64 torchvision) go in the same publish: one plan, one index.
    companions: dict[str, Artifact] = {}  # a companion's input name (conda_package[torchvision]) -> its file
    for package in plan.dependents:
        for kind in ("conda_package", "repaired_wheel"):
            if (name := package_artifact(kind, package)) in ctx.inputs:
                companions[name] = ctx.inputs[name]
    # The 2018 channel's names a cell of that era adds (pytorch-cpu, torchvision-cpu, cudaXY): stages/conda/era.py
    companions.update({name: a for name, a in ctx.inputs.items() if is_era_artifact(name)})
    condas = [a for name, a in companions.items() if name.startswith("conda_package")]
    wheels = [a for name, a in companions.items() if name.startswith("repaired_wheel")]
    input_of = {a.path: name for name, a in companions.items()}
    try:
        channel = open_channel(plan.channel, ctx.root)
        with channel.locked():
            conda_uploads = [(a, plan.conda.subdir) for a in (conda, *condas)]
            uploads = channel.plan(conda_uploads, [wheel, *wheels], replace=ctx.options.replace)
            published = channel.apply(uploads)
    except UserError as exc:
        raise StageFailed(NAME, str(exc).removeprefix("publish: ")) from None
    summary = ", ".join(f"{u.channel_path} ({u.action})" for u in uploads)
    # A local channel's files are artifacts of the run; a remote channel's are named in the message (its URL).
    outputs = {
        _published(u.kind, input_of.get(u.artifact.path)): a
        for u, a in zip(uploads, published, strict=True)
        if a.path.is_file()
    }
    return StageResult(outputs=outputs, message=f"{channel.url}: {summary}")


def _published(kind: str, companion_input: str | None) -> str:
    """``published_conda``, or for a companion's file ``published_conda[torchvision]``."""
    if companion_input is None:
        return f"published_{kind}"
    return f"published_{kind}" + companion_input[companion_input.index("["):]


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("repaired_wheel", "conda_package", *companion_artifacts("repaired_wheel", "conda_package"),
           *era_artifacts("conda_package")),
    writes=("published_conda", "published_wheel", *companion_artifacts("published_conda", "published_wheel"),
            *era_artifacts("published_conda")),
    always_runs=lambda options: True,  # cheap when nothing changed, and the channel may have changed since
    copies_inputs=True,
)
