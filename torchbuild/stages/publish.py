"""publish: the cell's conda package and wheel into the channel (the local directory by default; s3:// and
anaconda:// too, see torchbuild/channels). Artifacts built elsewhere are published with ``pipeline.py publish``."""

from __future__ import annotations

from torchbuild.channels.backends import open_channel
from torchbuild.errors import StageFailed, UserError
from torchbuild.results import StageResult
from torchbuild.stages import Context, Stage, companion_artifacts, era_artifacts, published_kind

NAME = "publish"


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    # Every artifact that is a package in a channel (stages.published_kind): torch's, each package's built beside it
    # (win-64 torchvision, a compiled companion) and the 2018 names' (stages/conda/era.py): one plan, one index.
    packages = {name: artifact for name, artifact in ctx.inputs.items() if published_kind(name)}
    missing = [name for name in ("conda_package", "repaired_wheel") if name not in packages]
    if missing:
        raise StageFailed(NAME, f"no {missing[0]!r} artifact from the earlier stages to publish")
    conda, wheel = packages.pop("conda_package"), packages.pop("repaired_wheel")
    condas = [a for name, a in packages.items() if published_kind(name) == "conda"]
    wheels = [a for name, a in packages.items() if published_kind(name) == "wheel"]
    input_of = {a.path: name for name, a in packages.items()}
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
    always_runs=lambda options, plan: True,  # cheap when nothing changed, and the channel may have changed since
    copies_inputs=True,
)
