"""source: the torch wheel the rest of the cell works on (prebuilt mode).

Either the wheel given with ``--wheel PATH`` (validated against the Plan and copied in), or the wheel pip finds for
the Plan in the package indexes and find-links it is configured with (pip.conf, PIP_* variables), chosen by
``pip download`` for the Plan's exact platform / Python / ABI tags:

- a ``file://`` hit (find-links, a local index) is used where it lies: hashed while it is copied into the stage
  directory, never put in the cache;
- a remote hit is downloaded by pip (its progress bar goes to the terminal) and kept in
  ``<cache>/wheels/<sha256>/<file>``; a later run hands the cached file to pip, which then downloads nothing.

(``pip install --dry-run --report`` is not used: pips before pypa/pip#13482 download the whole wheel just to write
the report, so every run would fetch it.)

Output: ``wheel``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from torchbuild import wheel_version, wheelfile
from torchbuild.compat import Rule
from torchbuild.console import console
from torchbuild.errors import StageFailed, UserError
from torchbuild.files import copy_atomic, link, link_atomic
from torchbuild.plan import Plan
from torchbuild.stages import Artifact, Context, StageResult

STAGE = "source"
PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Fetched:
    """The wheel pip chose for the Plan, and where it now is on this machine."""

    url: str  # where pip found it (file://, https://)
    path: Path  # the local original for a file:// hit, else the cache entry
    downloaded: bool  # pip fetched it over the network in this run

    @property
    def is_local(self) -> bool:
        return urllib.parse.urlparse(self.url).scheme == "file"


class NotFound(StageFailed):
    """pip found no wheel for the Plan (as opposed to a failed download)."""


def untagged_plan(plan: Plan) -> Plan | None:
    """The Plan as it would be for the plain release version, where packaging.yaml's ``untagged_wheels`` says
    that PyPI's unlabelled wheel is this cell's variant (win-64 CPU); None elsewhere."""
    rules = yaml.safe_load(resources.files("torchbuild.data").joinpath("packaging.yaml").read_text(encoding="utf-8"))
    for row in rules.get("untagged_wheels") or ():
        rule = Rule(value=str(row["label"]), when=row.get("when") or {})
        if rule.applies(plan.platform, plan.torch, plan.cuda) and rule.value == plan.local_version:
            return dataclasses.replace(plan, version=plan.torch, wheel=plan.wheel.replace(plan.version, plan.torch, 1))
    return None


def _fetch_any(plan: Plan, cache_dir: Path, log: Path) -> tuple[Fetched, Plan]:
    """The Plan's wheel, else (where the data says so) the unlabelled wheel of the same build; with the Plan it fits."""
    plain = untagged_plan(plan)
    try:
        return fetch(plan, cache_dir, log), plan
    except NotFound:
        if plain is None:
            raise
        console.print(
            f"source: pip has no torch=={plan.version} (the error above); PyPI publishes this build unlabelled, "
            f"trying torch=={plain.version}",
            highlight=False,
        )
        try:
            return fetch(plain, cache_dir, log), plain
        except NotFound:
            raise NotFound(
                STAGE,
                f"pip finds neither {_describe(plan)} nor the unlabelled {_describe(plain)} (PyPI's name for this "
                f"build) in the configured package indexes; pass --wheel PATH, or see {log}",
            ) from None


def run(ctx: Context) -> StageResult:
    if ctx.options.source_dir is not None or ctx.options.git_ref is not None:
        from torchbuild import checkout

        return checkout.source_stage(ctx)  # compile mode: a checkout, not a wheel
    if ctx.options.wheel is not None:
        return _given(ctx, ctx.options.wheel)
    return _automatic(ctx)


# --- --wheel PATH ----------------------------------------------------------------------------------------


def _given(ctx: Context, path: Path) -> StageResult:
    plain = untagged_plan(ctx.plan)
    if plain is not None and path.is_file() and _fits(path, plain):
        artifact, note = _relabel(path, plain, ctx.plan, ctx.stage_dir(STAGE))
        return StageResult(outputs={"wheel": artifact}, message=f"given wheel {path} ({_mb(artifact.size)}; {note})")
    wheelfile.validate_for_plan(path, ctx.plan, stage=STAGE)
    artifact = copy_atomic(path, ctx.stage_dir(STAGE) / path.name)
    return StageResult(outputs={"wheel": artifact}, message=f"given wheel {path} ({_mb(artifact.size)})")


def _relabel(path: Path, fits: Plan, plan: Plan, out_dir: Path) -> tuple[Artifact, str]:
    """The unlabelled wheel, checked as what it is, given the Plan's version (dist-info only: seconds)."""
    wheelfile.validate_for_plan(path, fits, stage=STAGE)
    for stale in out_dir.glob("*.whl"):
        stale.unlink()
    try:
        dest = wheel_version.set_version(path, out_dir, plan.version)
    except (wheel_version.VersionError, OSError, zipfile.BadZipFile) as exc:
        raise StageFailed(STAGE, f"cannot give {path} the version {plan.version}: {exc}") from None
    wheelfile.validate_for_plan(dest, plan, stage=STAGE)
    note = f"{path.name} (PyPI's {plan.local_version} build, unlabelled) re-versioned to {plan.version}"
    return Artifact.of(dest), note


# --- found by pip ----------------------------------------------------------------------------------------


def pip_target_args(plan: Plan) -> list[str]:
    """pip options that make it choose wheels for the Plan's platform and Python instead of this host's."""
    _, abi = wheelfile.python_tags(plan)
    args = ["--only-binary=:all:", "--python-version", plan.python, "--implementation", "cp", "--abi", abi]
    for tag in wheelfile.accepted_platform_tags(plan):
        args += ["--platform", tag]
    return args


def _describe(plan: Plan) -> str:
    interpreter, abi = wheelfile.python_tags(plan)
    return f"torch=={plan.version} ({interpreter}-{abi}-{wheelfile.plan_platform_tag(plan)})"


def _pip_error(output: str) -> str:
    errors = [line.split("ERROR:", 1)[1].strip() for line in output.splitlines() if "ERROR:" in line]
    return " ".join(errors) or (output.strip().splitlines() or ["(no output)"])[-1]


# pip's log (--log is always verbose) names the link it prepared: "Added torch==2.13.0+cpu from <url> to build tracker"
_PREPARED = re.compile(r"Added torch==\S+ from (\S+) to build tracker")


def _fits(path: Path, plan: Plan) -> bool:
    try:
        return not wheelfile.plan_problems(wheelfile.parse_name(path), plan)
    except wheelfile.WheelError:
        return False


def fetch(plan: Plan, cache_dir: Path, log: Path) -> Fetched:
    """Let pip choose and fetch the Plan's wheel: ``pip download`` for the Plan's platform and Python, into a scratch
    directory pre-filled (as hard links) with the cache entries that fit the Plan. pip skips the download of a file
    it finds there (and checks it against the index's sha256 where the index gives one), so a cached wheel is never
    downloaded again. A file:// hit is used where it lies; pip's scratch copy of it is dropped."""
    cache = _mkdir(cache_dir / "wheels")
    scratch = Path(tempfile.mkdtemp(prefix="incoming-", dir=cache))
    try:
        for entry in sorted(cache.glob("*/*.whl"), key=lambda e: e.stat().st_mtime):
            if _fits(entry, plan):
                (scratch / entry.name).unlink(missing_ok=True)
                link(entry, scratch / entry.name)
        pip_log = scratch / "pip.log"
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on", "--dest", str(scratch),
            "--log", str(pip_log), *pip_target_args(plan), f"torch=={plan.version}",
        ]  # fmt: skip
        # pip's output, its progress bar included, goes straight to the terminal: a real download takes minutes.
        try:
            code = subprocess.run(argv, check=False, timeout=PIP_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            raise StageFailed(STAGE, f"pip download of {_describe(plan)} took longer than {PIP_TIMEOUT_S} s") from None
        text = pip_log.read_text(encoding="utf-8", errors="replace") if pip_log.is_file() else ""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(argv)}\n{text}\n[exit {code}]\n")
        if code != 0:
            raise NotFound(
                STAGE,
                f"pip finds no prebuilt wheel {_describe(plan)} in the configured package indexes "
                f"({_pip_error(text)}). Point pip at one with PIP_INDEX_URL, PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS, "
                f"or pass --wheel PATH. Full log: {log}",
            )
        urls = _PREPARED.findall(text)
        if not urls:
            raise StageFailed(STAGE, f"pip download succeeded but its log does not say which file it took; see {log}")
        url = urls[-1]
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == "file":
            return Fetched(url=url, path=Path(urllib.request.url2pathname(parsed.path)), downloaded=False)
        got = scratch / urllib.parse.unquote(Path(parsed.path).name)
        if not got.is_file():
            raise StageFailed(STAGE, f"pip download reported {url} but {got} is not there; see {log}")
        entry = _mkdir(cache / Artifact.of(got).sha256) / got.name
        if not entry.is_file():
            link(got, entry)
        downloaded = any(line.endswith(got.name) for line in text.splitlines() if " Saved " in line)
        return Fetched(url=url, path=entry, downloaded=downloaded)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _automatic(ctx: Context) -> StageResult:
    plan = ctx.plan
    fetched, fits = _fetch_any(plan, ctx.options.cache_dir, ctx.stage_dir("logs") / f"{STAGE}.log")
    out_dir = ctx.stage_dir(STAGE)
    if fetched.is_local:
        how = f"local file {fetched.path}, not downloaded"
    else:
        where = "downloaded from " + fetched.url.split("#", 1)[0] if fetched.downloaded else "cached"
        how = f"{where}; cache entry {fetched.path.parent}"
    if fits is not plan:
        artifact, note = _relabel(fetched.path, fits, plan, out_dir)
        how += "; " + note
    else:
        dest = out_dir / fetched.path.name
        artifact = copy_atomic(fetched.path, dest) if fetched.is_local else link_atomic(fetched.path, dest)
        wheelfile.validate_for_plan(dest, plan, stage=STAGE)
    return StageResult(outputs={"wheel": artifact}, message=f"{artifact.path.name} ({_mb(artifact.size)}; {how})")


# --- `latest` --------------------------------------------------------------------------------------------


def newest_available(plan: Plan, releases: Sequence[str]) -> str | None:
    """Of ``releases`` (newest first), the newest for which the configured package indexes hold a prebuilt wheel of
    the Plan's variant (version ``<release>+<plan.local_version>``, Python/ABI and platform tags); None if none."""
    argv = [sys.executable, "-m", "pip", "index", "versions", "torch", *pip_target_args(plan)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"`pip index versions torch` took longer than {PIP_TIMEOUT_S} s") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        if "No matching distribution" in output:
            return None
        raise UserError(f"`pip index versions torch` failed (exit {proc.returncode}): {_pip_error(output)}")
    available: set[Version] = set()
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            for text in line.split(":", 1)[1].split(","):
                try:
                    available.add(Version(text.strip()))
                except InvalidVersion:
                    continue
    for release in releases:
        if Version(f"{release}+{plan.local_version}") in available:
            return release
    return None


# --- files -----------------------------------------------------------------------------------------------


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
