"""publish: the cell's conda package and wheel into the channel (the local directory by default; s3:// and
anaconda:// too, see torchbuild/channels). Artifacts built elsewhere are published with ``pipeline.py publish``."""

from __future__ import annotations

from torchbuild.channels.backends import open_channel
from torchbuild.errors import StageFailed, UserError
from torchbuild.results import StageResult
from torchbuild.stages import Context, Stage

NAME = "publish"


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    try:
        conda, wheel = ctx.inputs["conda_package"], ctx.inputs["repaired_wheel"]
    except KeyError as missing:
        raise StageFailed(NAME, f"no {missing} artifact from the earlier stages to publish") from None
    try:
        channel = open_channel(plan.channel, ctx.root)
        with channel.locked():
            uploads = channel.plan([(conda, plan.conda.subdir)], [wheel], replace=ctx.options.replace)
            published = channel.apply(uploads)
    except UserError as exc:
        raise StageFailed(NAME, str(exc).removeprefix("publish: ")) from None
    summary = ", ".join(f"{u.channel_path} ({u.action})" for u in uploads)
    # A local channel's files are artifacts of the run; a remote channel's are named in the message (its URL).
    outputs = {f"published_{u.kind}": a for u, a in zip(uploads, published, strict=True) if a.path.is_file()}
    return StageResult(outputs=outputs, message=f"{channel.url}: {summary}")


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("repaired_wheel", "conda_package"),
    writes=("published_conda", "published_wheel"),
    always_runs=lambda options: True,  # cheap when nothing changed, and the channel may have changed since
)
