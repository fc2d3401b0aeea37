"""source: the torch wheel the rest of the cell works on (prebuilt mode), or the checkout it compiles.

Prebuilt mode: the wheel given with ``--wheel PATH`` (validated against the Plan and copied in), or the wheel the
package indexes and find-links pip is configured with (pip.conf, PIP_* variables) offer for the Plan's platform and
Python, chosen by uv's resolver and fetched by pip (host/pip.py ``download``):

- a ``file://`` hit (find-links, a local index) is used where it lies: hashed while it is copied into the stage
  directory, never put in the cache;
- a remote hit is downloaded by pip (its progress bar goes to the terminal) and kept in
  ``<cache>/wheels/<sha256>/<file>``; a later run checks the cached file against its sha256 (a damaged one is
  removed and downloaded again) and hands it to pip, which then downloads nothing.

Where the Plan says PyPI publishes this build without its local label (``prebuilt_unlabelled``: win-64 CPU; linux
CUDA where cuda_wheels.yaml records PyPI's wheel as the cell's CUDA build), the unlabelled wheel of the release is
taken when the labelled one is not offered, and given the Plan's version; a CUDA one only once the wheel itself
proves it is that build (torch/version.py's ``cuda``, its nvidia-*-cuXX requirements).

Compile mode (``--source-dir`` or ``--git-ref``): the checkout, given or cloned, validated and described in
``checkout.json``.

Beside torch, PyPI's wheel of each companion the Plan builds (win-64 torchvision), fetched by the sha256
companions.yaml pins (host/downloads.py ``pinned_wheel``: uv chooses, pip fetches, the same cache): written as
``source_wheel[<name>]``, in every mode. On a CUDA cell an unlabelled companion wheel (PyPI's linux ones) is given the
cell's label as torch's is (0.25.0 -> 0.25.0+cu128), once its own ``<name>/version.py`` says it is that build. One
that cannot be had fails the stage where ``packages`` names it; asked for by default, it is left out, said in the
stage's message and the report (the later stages build what they get).

Writes ``source_wheel`` or ``checkout``, and ``source_info`` (source.json, torchbuild/wheel/provenance.py: the origin,
its sha256 or commit, and the time the cell's archives carry).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import checkout, downloads, pip
from torchbuild.host.console import console
from torchbuild.host.files import copy_atomic, link, link_atomic
from torchbuild.knowledge.build_deps import DependencyError
from torchbuild.knowledge.companions import WHERE
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.results import Artifact, StageResult, sha256_of
from torchbuild.stages import Context, Stage, companion_artifacts, package_artifact
from torchbuild.wheel import provenance, version_py, wheelfile
from torchbuild.wheel import version as wheel_version

NAME = "source"
SOURCE_JSON = "source.json"  # where the wheel or checkout came from, and the time the artifacts carry


def run(ctx: Context) -> StageResult:
    if ctx.options.compiles:
        result = _checkout(ctx)
    elif ctx.options.wheel is not None:
        result = _given(ctx, ctx.options.wheel)
    else:
        result = _automatic(ctx)
    return _with_companions(ctx, result)


def _with_companions(ctx: Context, result: StageResult) -> StageResult:
    """``result`` with PyPI's wheel of each companion the Plan builds, fetched by the sha256 companions.yaml pins
    (host/downloads.py: uv chooses, pip fetches, ``<cache>/wheels/<sha256>/``), and the checkout of each it
    compiles."""
    built = list(ctx.plan.dependents)
    if not built:
        return result
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    outputs, said = dict(result.outputs), []
    for companion in built:
        if companion.build is not None:
            made, line = _companion_checkout(ctx, companion, log)
            outputs.update(made)
            said.append(line)
            continue
        pin = f"{companion.name}=={companion.release}"
        try:
            entry = downloads.pinned_wheel(
                pin, companion.wheel, companion.sha256, ctx.plan.pip_target, ctx.options.cache_dir, log, WHERE
            )
        except DependencyError as exc:
            if companion.requested:
                raise StageFailed(NAME, f"{companion.name}: {exc}") from None
            # Asked for by default only: the cell ships torch without it, and says so.
            said.append(f"{companion.name} {companion.release} not built: {exc}")
            continue
        if ctx.plan.is_cuda and wheelfile.parse_name(entry).version.local is None:
            artifact, note = _relabel_companion(entry, companion.name, ctx.plan, ctx.stage_dir(NAME))
        else:
            artifact, note = link_atomic(entry, ctx.stage_dir(NAME) / entry.name), ""
        outputs[package_artifact("source_wheel", companion)] = artifact
        said.append(f"{entry.name} ({_mb(artifact.size)}, sha256 as {WHERE} pins{note})")
    return dataclasses.replace(result, outputs=outputs, message=f"{result.message}; beside it {', '.join(said)}")


def _companion_checkout(ctx: Context, companion: ShippedPackage, log: Path) -> tuple[dict[str, Artifact], str]:
    """The checkout a companion is compiled from (given, or its ref cloned into the cache as torch's is), described
    in ``checkout[<name>]`` and its provenance in ``source_info[<name>]``."""
    build = companion.build
    assert build is not None
    if build.source_dir:
        path = Path(build.source_dir)
    else:
        path = checkout.clone(build.git_url, build.git_ref, ctx.options.cache_dir, log).path
    found = checkout.describe(path, "project", "", build.origin)
    folder = ctx.stage_dir(NAME) / companion.name
    folder.mkdir(parents=True, exist_ok=True)
    checkout.write(found, folder / "checkout.json")
    epoch = provenance.checkout_epoch(path, found.commit)
    info = provenance.source_info("checkout", build.origin, "", found.commit, epoch)
    info.write(folder / SOURCE_JSON)
    made = {
        package_artifact("checkout", companion): Artifact.of(folder / "checkout.json"),
        package_artifact("source_info", companion): Artifact.of(folder / SOURCE_JSON),
    }
    commit = f" at {found.commit[:12]}" if found.commit else ""
    return made, f"{companion.name} {build.version}'s checkout{commit}: {found.path}"


def _relabel_companion(path: Path, name: str, plan: Plan, out_dir: Path) -> tuple[Artifact, str]:
    """PyPI's unlabelled companion wheel of a CUDA cell, given the cell's label as torch's is (0.25.0 ->
    0.25.0+cu128), once its own <name>/version.py proves it is that build (``__version__ = '0.25.0+cu128'``)."""
    with as_stage_failure(NAME, wheelfile.WheelError):
        declared = version_py.read(path, name).version
    version = f"{wheelfile.parse_name(path).version}+{plan.local_version}"
    if declared != version:
        raise StageFailed(
            NAME,
            f"{path.name} is not the {plan.local_version} build this cell's torch needs: its {name}/version.py says "
            f"__version__ = {declared!r}, not {version!r}",
        )
    dest = out_dir / name
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("*.whl"):
        stale.unlink()
    try:
        made = wheel_version.set_version(path, dest, version)
    except (wheel_version.VersionError, OSError, zipfile.BadZipFile) as exc:
        raise StageFailed(NAME, f"cannot give {path.name} the version {version}: {exc}") from None
    return Artifact.of(made), f"; unlabelled, its {name}/version.py says '{declared}': re-versioned to {version}"


# --- compile mode ----------------------------------------------------------------------------------------


def _checkout(ctx: Context) -> StageResult:
    options = ctx.options
    if options.source_dir is not None:
        path, origin = options.source_dir, "--source-dir"
    else:
        assert options.git_ref is not None
        log = ctx.stage_dir("logs") / f"{NAME}.log"
        path, origin = (
            checkout.clone(options.git_url, options.git_ref, options.cache_dir, log).path,
            (f"{options.git_url}@{options.git_ref}"),
        )
    found = checkout.describe(path, options.source_kind, Version(ctx.plan.version).base_version, origin)
    manifest = ctx.stage_dir(NAME) / "checkout.json"
    checkout.write(found, manifest)
    info = provenance.source_info("checkout", origin, "", found.commit, provenance.checkout_epoch(path, found.commit))
    what = f"PyTorch {found.version}" if found.kind == "pytorch" else f"{found.kind} (not checked as PyTorch)"
    commit = f" at {found.commit[:12]}" if found.commit else ""
    outputs = {"checkout": Artifact.of(manifest), "source_info": _write_info(ctx, info)}
    return StageResult(outputs=outputs, message=f"{what}{commit}: {found.path} ({origin})")


def _write_info(ctx: Context, info: provenance.SourceInfo) -> Artifact:
    path = ctx.stage_dir(NAME) / SOURCE_JSON
    info.write(path)
    return Artifact.of(path)


def _wheel_info(ctx: Context, original: Path, origin: str, sha256: str | None = None) -> Artifact:
    sha = sha256 or Artifact.of(original).sha256
    return _write_info(ctx, provenance.source_info("wheel", origin, sha, "", provenance.wheel_epoch(original)))


# --- --wheel PATH ----------------------------------------------------------------------------------------


def _given(ctx: Context, path: Path) -> StageResult:
    plan = ctx.plan
    unlabelled = plan.unlabelled_version
    if unlabelled is not None and path.is_file() and _fits(path, plan, unlabelled):
        artifact, note = _relabel(path, plan, ctx.stage_dir(NAME), unlabelled)
        outputs = {"source_wheel": artifact, "source_info": _wheel_info(ctx, path, str(path))}
        return StageResult(outputs=outputs, message=f"given wheel {path} ({_mb(artifact.size)}; {note})")
    _validate(path, plan.expected_wheel())
    artifact = copy_atomic(path, ctx.stage_dir(NAME) / path.name)
    outputs = {"source_wheel": artifact, "source_info": _wheel_info(ctx, path, str(path), artifact.sha256)}
    return StageResult(outputs=outputs, message=f"given wheel {path} ({_mb(artifact.size)})")


def _validate(path: Path, want: wheelfile.Expected) -> None:
    with as_stage_failure(NAME, wheelfile.WheelError):
        wheelfile.validate(path, want)


_CUDA_SUFFIX = re.compile(r"^nvidia-[a-z0-9-]+-cu(\d+)$")


def cuda_build_of(path: Path, markers: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """What a torch wheel says about its CUDA: torch/version.py's ``cuda`` (None: a CPU build), and the CUDA majors
    of its nvidia-*-cuXX requirements (cu12, cu13) that apply to the target (``markers``: its PEP 508 values)."""
    with as_stage_failure(NAME, wheelfile.WheelError):
        cuda = version_py.read(path).cuda
    requires = wheelfile.read_metadata(path).get_all("Requires-Dist") or []
    applying = [r for r in map(Requirement, map(str, requires)) if r.marker is None or r.marker.evaluate(dict(markers))]
    names = [canonicalize_name(r.name) for r in applying]
    return cuda, sorted({m[1] for n in names if (m := _CUDA_SUFFIX.match(n))})


def _prove_cuda(path: Path, plan: Plan) -> str:
    """An unlabelled wheel taken as the Plan's CUDA build must be one: torch/version.py's cuda is the Plan's and its
    nvidia-*-cuXX requirements are that CUDA major's. Returns what proved it."""
    cuda, majors = cuda_build_of(path, plan.conda.marker_environment)
    major = plan.cuda.split(".")[0]
    if cuda != plan.cuda or majors != [major]:
        raise StageFailed(
            NAME,
            f"{path.name} is not a CUDA {plan.cuda} build: its torch/version.py says cuda = {cuda!r} and its "
            f"nvidia-* requirements are for CUDA {', '.join(majors) or 'none'}",
        )
    return f"torch/version.py cuda = '{cuda}', nvidia-*-cu{major} requirements"


def _relabel(path: Path, plan: Plan, out_dir: Path, unlabelled: str) -> tuple[Artifact, str]:
    """The wheel of version ``unlabelled`` (no local label), checked as what it is (a CUDA build: proven from the
    wheel), given the Plan's version (dist-info only: seconds)."""
    _validate(path, plan.expected_wheel(unlabelled))
    proof = _prove_cuda(path, plan) if plan.is_cuda else ""
    for stale in out_dir.glob("*.whl"):
        stale.unlink()
    try:
        dest = wheel_version.set_version(path, out_dir, plan.version)
    except (wheel_version.VersionError, OSError, zipfile.BadZipFile) as exc:
        raise StageFailed(NAME, f"cannot give {path} the version {plan.version}: {exc}") from None
    _validate(dest, plan.expected_wheel())
    proven = f", proven by {proof}" if proof else ""
    whose = "built without a local label" if plan.own_build else "PyPI's {plan.local_version} build, unlabelled"
    note = f"{path.name} ({whose.format(plan=plan)}{proven}) re-versioned to {plan.version}"
    return Artifact.of(dest), note


# --- found by pip ----------------------------------------------------------------------------------------


def describe(plan: Plan, version: str | None = None) -> str:
    tags = plan.wheel_tags
    return f"torch=={version or plan.version} ({tags.interpreter}-{tags.abi}-{tags.platform})"


def _fits(path: Path, plan: Plan, version: str | None = None) -> bool:
    try:
        return not wheelfile.expected_problems(wheelfile.parse_name(path), plan.expected_wheel(version))
    except wheelfile.WheelError:
        return False


def fetch(plan: Plan, cache_dir: Path, log: Path, version: str | None = None) -> pip.Fetched:
    """Choose and fetch the Plan's wheel (``version``: exactly that version of the same build, see
    ``Plan.expected_wheel``) for the Plan's platform and Python (``pip.download``), into a scratch directory
    pre-filled (as hard links) with the cache entries that fit, so that a cached wheel is never downloaded again. A
    file:// hit is used where it lies; its scratch copy is dropped. The returned ``path`` is the cache entry or the
    original file."""
    cache = cache_dir / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="incoming-", dir=cache))
    try:
        for entry in sorted(cache.glob("*/*.whl"), key=lambda e: e.stat().st_mtime):
            if _fits(entry, plan, version) and _intact(entry):
                (scratch / entry.name).unlink(missing_ok=True)
                link(entry, scratch / entry.name)
        wanted = describe(plan, version)
        requirement = f"torch==={version}" if version else f"torch=={plan.version}"  # ===: exactly, no label
        try:
            got = pip.download([requirement], scratch, log=log, target=plan.pip_target, live=True)[-1]
        except pip.PipError as exc:
            if exc.no_match:
                raise NotFound(
                    NAME,
                    f"pip finds no prebuilt wheel {wanted} in the configured package indexes ({exc.detail}). Point "
                    "pip at one with PIP_INDEX_URL, PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS, or pass --wheel PATH. "
                    f"Full log: {log}",
                ) from None
            raise StageFailed(NAME, f"fetching {wanted}: {exc}") from None
        original = got.local_source
        if original is not None:
            return pip.Fetched(path=original, url=got.url, downloaded=False)
        if not got.path.is_file():
            raise StageFailed(NAME, f"pip download reported {got.url} but {got.path} is not there; see {log}")
        entry = cache / Artifact.of(got.path).sha256 / got.path.name
        entry.parent.mkdir(parents=True, exist_ok=True)
        if not entry.is_file():
            link(got.path, entry)
        return pip.Fetched(path=entry, url=got.url, downloaded=got.downloaded)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _intact(entry: Path) -> bool:
    """Whether the cache entry still is the file its folder is named by (the sha256). A damaged one (a truncated
    copy, a disk fault, an edit) would be handed to pip and fail every later run: it is removed, saying so, and
    the wheel is downloaded again."""
    if sha256_of(entry) == entry.parent.name:
        return True
    console.print(
        f"[yellow]warning:[/] the cache entry {entry} is damaged (its sha256 is not {entry.parent.name}, the name "
        "of its folder): removed; the wheel is downloaded again.",
        highlight=False,
    )
    shutil.rmtree(entry.parent, ignore_errors=True)
    return False


class NotFound(StageFailed):
    """pip found no wheel for the Plan (as opposed to a failed download)."""


def _fetch_any(plan: Plan, cache_dir: Path, log: Path, verbose: bool = False) -> tuple[pip.Fetched, bool]:
    """The Plan's wheel, else (where the Plan says PyPI leaves the label off) the unlabelled wheel of the same
    build; with whether it is the unlabelled one. The first probe is expected to fail for such a build: what the
    resolver said is shown with ``verbose`` only (it is in the log)."""
    try:
        return fetch(plan, cache_dir, log), False
    except NotFound as exc:
        if not plan.prebuilt_unlabelled:
            raise
        if verbose:
            console.print(
                f"source: {exc}\nsource: PyPI publishes this build unlabelled, trying torch=={plan.torch}",
                highlight=False,
            )
        try:
            return fetch(plan, cache_dir, log, version=plan.torch), True
        except NotFound:
            raise NotFound(
                NAME,
                f"pip finds neither {describe(plan)} nor the unlabelled {describe(plan, plan.torch)} (PyPI's name "
                f"for this build) in the configured package indexes; pass --wheel PATH, or see {log}",
            ) from None


def _automatic(ctx: Context) -> StageResult:
    plan = ctx.plan
    log = ctx.stage_dir("logs") / f"{NAME}.log"
    fetched, unlabelled = _fetch_any(plan, ctx.options.cache_dir, log, ctx.options.verbose)
    out_dir = ctx.stage_dir(NAME)
    local = fetched.local_source is not None
    if local:
        how = f"local file {fetched.path}, not downloaded"
    else:
        where = "downloaded from " + fetched.url.split("#", 1)[0] if fetched.downloaded else "cached"
        how = f"{where}; cache entry {fetched.path.parent}"
    if unlabelled:
        artifact, note = _relabel(fetched.path, plan, out_dir, plan.torch)
        how += "; " + note
    else:
        dest = out_dir / fetched.path.name
        artifact = copy_atomic(fetched.path, dest) if local else link_atomic(fetched.path, dest)
        _validate(dest, plan.expected_wheel())
    origin = fetched.url.split("#", 1)[0]
    sha = fetched.path.parent.name if not local else None  # a cache entry's folder is its sha256
    outputs = {"source_wheel": artifact, "source_info": _wheel_info(ctx, fetched.path, origin, sha)}
    return StageResult(outputs=outputs, message=f"{artifact.path.name} ({_mb(artifact.size)}; {how})")


# --- files -----------------------------------------------------------------------------------------------


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


STAGE = Stage(
    name=NAME,
    run=run,
    writes=("source_wheel", "checkout", "source_info", *companion_artifacts("source_wheel", "checkout", "source_info")),
    shaped_by=("wheel", "source_dir", "git_ref", "git_url", "source_kind"),
    # a checkout can change without its path changing
    always_runs=lambda options, plan: options.compiles or any(p.build for p in plan.dependents),
)
