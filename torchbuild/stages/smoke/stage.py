"""The smoke stages (smoke-wheel, smoke-conda): the artifacts proven in fresh environments. This module is no stage
of its own: it is what the two stage modules share (each declares one environment).

Each stage builds its environment fresh under its stage directory, by the backend that can run the target here:

- on a host of the cell's platform (venv.py): smoke-wheel, a venv with the repaired wheel; smoke-conda, a
  venv as a conda prefix with the conda package linked into it by py-rattler;
- a win-64 cell on a Linux host with Wine (wine.py): python.org's embeddable CPython for Windows of the cell's
  Python (pinned by sha256), with the wheel and its Windows dependencies, or the conda layout of the package;
  under Wine, with the VC runtime native-only.

The wheel's environment needs only the repaired wheel and runs beside conda and verify; the conda package's beside
verify, on the host and under Wine alike (each stage's Wine session has a prefix and a wineserver of its own). In
each, ``smoke_checks.py`` runs from an empty working directory, the checks in child processes, and
every check becomes a named ``Check`` ("wheel: import", "conda: dataloader spawn", ...). Every result says where it
ran ("under Wine 8.0, CPython 3.11.9 embeddable", "on this linux-64 host (Python 3.11.7)"). A failed check fails the
stage; the failing environment is kept for debugging. Where this host cannot run the target (a win-64 cell without
Wine, a Python without an embeddable distribution, no interpreter for the Plan's Python), the stage is skipped with
the reason and no check is reported as passed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from torchbuild.config.user_tests import UserTest
from torchbuild.errors import StageFailed, UserError
from torchbuild.host import progress, scratch
from torchbuild.host.files import write_atomic
from torchbuild.host.interpreters import find_python, install_hint, searched
from torchbuild.host.platform import host_platform
from torchbuild.knowledge.python_embed import not_pinned
from torchbuild.plan import Plan
from torchbuild.platforms.windows import python_embed, wine
from torchbuild.results import Check, StageResult, Status
from torchbuild.stages import Context, Stage, companion_artifact, companion_artifacts
from torchbuild.stages.smoke import by_content, user_test
from torchbuild.stages.smoke.env import Backend, Env, parse_results
from torchbuild.stages.smoke.resources import smoke_checks
from torchbuild.stages.smoke.venv import VenvBackend, wheel_requirements
from torchbuild.stages.smoke.wine import WineBackend

__all__ = ["parse_results", "reads", "run", "stage", "stage_name", "wheel_requirements"]

INPUTS = {"wheel": "repaired_wheel", "conda": "conda_package"}  # environment -> the artifact installed into it
# The packages installed beside torch in each environment, every one the Plan builds: their artifact of the
# environment's kind (repaired_wheel[torchaudio], ...); their checks run too (smoke_checks.COMPANION_CHECKS, or for
# one without checks of its own the import check of checks_beside.py).


def stage_name(kind: str) -> str:
    return f"smoke-{kind}"


def _required(kind: str) -> tuple[str, ...]:
    return (INPUTS[kind],) if kind == "wheel" else (INPUTS[kind], INPUTS["wheel"])


def reads(kind: str) -> tuple[str, ...]:
    """What the stage of ``kind`` reads: its artifact; the conda environment also takes the wheel's requirements;
    and the same kind of artifact of each package the Plan builds beside torch."""
    return (*_required(kind), *companion_artifacts(INPUTS[kind]))


def _companions(ctx: Context, kind: str) -> dict[str, Path]:
    """The artifacts of ``kind`` of the packages beside torch that this run made (the Plan builds them), by name."""
    built = [p.name for p in ctx.plan.dependents]
    found = {name: ctx.inputs.get(companion_artifact(INPUTS[kind], name)) for name in built}
    return {name: artifact.path for name, artifact in found.items() if artifact is not None}


def _skipped(
    plan: Plan, kind: str, reason: str, short: str | None = None, status: Status = "skipped"
) -> StageResult:
    """Every check of the stage not run, for ``reason``: "skipped", or "unverified" where the cell is published
    without a check a user relies on (its Python is missing here)."""
    built = [p.name for p in plan.dependents]
    said = "skipped" if status == "skipped" else "not run"
    names = [*smoke_checks.check_names(built), *([user_test.NAME] if plan.user_test else [])]
    checks = tuple(Check(name=f"{kind}: {name}", status=status, message=f"{said}: {reason}") for name in names)
    return StageResult(status=status, checks=checks, message=f"{said}: {short or reason.split(' (')[0]}")


def _inputs(ctx: Context, kind: str) -> dict[str, Path]:
    """The artifacts of the stage of ``kind``, by environment kind."""
    name = stage_name(kind)
    wanted = _required(kind)
    missing = [artifact for artifact in wanted if artifact not in ctx.inputs]
    if missing:
        raise StageFailed(
            name,
            f"needs the input{'s' if len(wanted) > 1 else ''} {' and '.join(wanted)}; missing: {', '.join(missing)}; "
            f"given: {', '.join(sorted(ctx.inputs)) or 'none'}",
        )
    paths = {env: ctx.inputs[artifact].path for env, artifact in INPUTS.items() if artifact in wanted}
    for env, path in paths.items():
        if not path.is_file():
            raise StageFailed(name, f"the {env} input {path} does not exist (rerun the stage that makes it)")
    return paths


def backend_for(ctx: Context, kind: str) -> Backend | StageResult:
    """The backend that runs the cell's target on this host, or the skipped result saying why there is none."""
    plan = ctx.plan
    host = host_platform()
    backend = plan.platform_module.smoke_backend(host)
    if backend == "venv":
        python = find_python(plan.python)
        if python is None:
            # not a plain skip: the cell's own Python is what a user runs the package with
            why = (f"needs Python {plan.python} on this host (none {searched(plan.python)}): "
                   f"`{install_hint(plan.python)}`, then rerun")  # fmt: skip
            return _skipped(plan, kind, why, why, status="unverified")
        return VenvBackend(plan, python, _inputs(ctx, kind)["wheel"], ctx.options.cache_dir)
    if backend is None or plan.windows is None:  # Wine runs win-64 cells only
        return _skipped(plan, kind, f"needs a {plan.platform} host (this host is {host})")
    found = wine.find()
    if found is None:
        return _skipped(plan, kind, f"needs a win-64 host or Wine ({wine.INSTALL_HINT}; this host is {host})",
                        f"needs a win-64 host or Wine ({wine.INSTALL_HINT})")  # fmt: skip
    pinned = plan.windows.embeddable
    if pinned is None:
        missing = not_pinned(plan.windows.embeddable_missing)
        return _skipped(plan, kind, str(missing), f"needs a win-64 host: {missing.short}")
    paths = _inputs(ctx, kind)
    name = stage_name(kind)
    try:  # a download whose sha256 is not the pinned one stops here, before anything runs
        embedded = python_embed.provision(pinned, ctx.options.cache_dir)
    except UserError as exc:
        raise StageFailed(name, f"the embeddable CPython {pinned.cpython}: {exc}") from None
    return WineBackend(plan, found, embedded, paths["wheel"], ctx.options.cache_dir, ctx.stage_dir(name))


KEPT = "in-memory-environment"  # in the stage directory: where the environment in memory is, until removed
UNPACKED_PER_PACKED = 8  # a torch conda package unpacks to 4-5 times its size; room for the rest of the prefix


def _environment_root(base: Path, kind: str, backend: Backend, artifact: Path) -> Path:
    """Where the environment is made: the conda prefix on the host in memory where there is room (rattler extracts
    the package into the prefix's package cache and links it from there: thousands of new files, cheaper in memory),
    else, and for every other environment, ``base/kind`` (uv hard-links the wheel's files from its cache on the
    same disk; into memory it would have to copy them). An environment in memory that an earlier failed run kept is
    removed first."""
    recorded = base / KEPT
    if recorded.is_file():
        earlier = Path(recorded.read_text(encoding="utf-8").strip())
        if scratch.in_memory_path(earlier) and earlier.name.startswith("torchbuild-smoke-"):
            scratch.remove(earlier)
        recorded.unlink()
    if kind == "conda" and isinstance(backend, VenvBackend):
        size = artifact.stat().st_size * UNPACKED_PER_PACKED
        made = scratch.make_in_memory(size, f"torchbuild-{stage_name(kind)}-", keep_while=recorded)
        if made is not None:
            write_atomic(recorded, f"{made}\n")
            shutil.rmtree(base / kind, ignore_errors=True)  # one an earlier failed run kept on disk
            return made
    return base / kind


def _failure(name: str, env: Env, backend: Backend, checks: Sequence[Check]) -> StageFailed:
    failed = [c for c in checks if c.status == "failed"]
    first = failed[0]
    where = f"{backend.describe(env.kind)} {backend.where}"
    lines = [f"{first.name} failed in {where} with {env.artifact.name}: {first.message}"]
    lines += [f"also failed: {c.name}: {c.message.splitlines()[0]}" for c in failed[1:]]
    lines += _not_run([c for c in checks if c.status == "unverified"])
    lines.append(_kept(env))
    return StageFailed(name, "\n".join(lines), checks)


def _not_run(checks: Sequence[Check]) -> list[str]:
    """One line for the checks that did not run (the harness's failure, not the artifact's), with why: their first
    reason, and how many share it."""
    if not checks:
        return []
    why = checks[0].message.removeprefix("not run: ").splitlines()[0]
    return [f"not run ({len(checks)} of the checks, not the artifact's fault): {', '.join(c.name for c in checks)}: "
            f"{why}"]  # fmt: skip


def _kept(env: Env) -> str:
    where = " (in memory; the next run of this stage removes it)" if scratch.in_memory_path(env.root) else ""
    return f"The environment is kept for debugging: {env.root}{where} (log: {env.log})"


def _run_env(name: str, env: Env, backend: Backend, test: UserTest | None) -> list[Check]:
    """The environment made and checked, the user's ``test`` last: its checks. Raises the stage's failure, with the
    checks, if one failed."""
    env.log.unlink(missing_ok=True)
    started = time.perf_counter()
    progress.doing(name, f"making {backend.describe(env.kind)} {backend.where} with {env.artifact.name}")
    try:
        what = backend.setup(env)
    except UserError as exc:  # a StageFailed of the backend, pip's error, a download refused
        message = str(exc)
        setup = Check(name=f"{env.kind}: install", status="failed", message=message, file=env.artifact.name)
        failed = f"{setup.name} failed ({backend.where}): {setup.message}\n{_kept(env)}"
        raise StageFailed(name, failed, [setup]) from None
    took = time.perf_counter() - started
    message = f"{what}: {took:.1f} s"
    installed = Check(name=f"{env.kind}: install", status="passed", message=message, file=env.artifact.name)
    progress.doing(name, f"made in {took:.0f} s; running the checks (import, numpy, matmul, conv2d, svd, DataLoader "
                         "spawn, console scripts, torch.compile, a CMake consumer, ...)")  # fmt: skip
    checks = [installed, *backend.run_checks(env)]
    if test is not None:
        progress.doing(name, f"running test_command: {test.command}")
        checks.append(backend.run_user_test(env, test))
    if any(c.status == "failed" for c in checks):
        raise _failure(name, env, backend, checks)
    return checks


def run(ctx: Context, kind: str) -> StageResult:
    """The stage of ``kind`` (wheel or conda): its environment made fresh and checked."""
    chosen = backend_for(ctx, kind)
    if isinstance(chosen, StageResult):
        return chosen
    backend = chosen
    name = stage_name(kind)
    base = ctx.stage_dir(name)
    artifact = _inputs(ctx, kind)[kind]
    companions = _companions(ctx, kind)
    if kind == "wheel" and isinstance(backend, VenvBackend):  # uv unpacks each wheel once per content
        artifact = by_content.wheel_path(ctx.inputs[INPUTS[kind]], ctx.options.cache_dir)
        companions = {name: by_content.wheel_path(ctx.inputs[companion_artifact(INPUTS[kind], name)],
                                                  ctx.options.cache_dir) for name in companions}  # fmt: skip
    root = _environment_root(base, kind, backend, artifact)
    env = Env(kind, root, artifact, ctx.stage_dir("logs") / f"{name}.log", companions)
    try:
        all_checks = _run_env(name, env, backend, ctx.plan.user_test)
    finally:
        backend.close()
    scratch.remove(env.root)
    (base / KEPT).unlink(missing_ok=True)
    shutil.rmtree(base / "wineprefix", ignore_errors=True)
    return result(kind, backend, all_checks)


def result(kind: str, backend: Backend, all_checks: Sequence[Check]) -> StageResult:
    """The stage's result where no check failed: passed, or unverified where a check did not run (the harness's
    failure: the cell is published marked unverified, never passed; docs/publishing.md)."""
    ran = [c for c in all_checks if not c.name.endswith(": install")]
    passed = sum(c.status == "passed" for c in ran)
    skipped = [c for c in ran if c.status == "skipped"]
    not_run = [c for c in ran if c.status == "unverified"]
    message = f"{passed}/{len(ran)} checks passed {backend.where} in {backend.describe(kind)}"
    if isinstance(backend, WineBackend):
        message += f" ({', '.join(f'{k}={v}' for k, v in backend.settings.items())})"
    if skipped:
        message += "; skipped: " + ", ".join(
            f"{c.name} ({c.message.removeprefix('skipped ').strip('()')})" for c in skipped
        )
    in_utf8_mode = [c.name for c in ran if c.message.startswith(smoke_checks.LOCALE_RETRIED)]
    if in_utf8_mode:
        message += (f"; {', '.join(in_utf8_mode)}: {smoke_checks.LOCALE_RETRIED}, not with this host's locale "
                    "encoding (the host's setting, not the artifact: the check says why)")  # fmt: skip
    if not_run:
        message = "; ".join([*_not_run(not_run), message])
    status: Status = "unverified" if not_run else "passed"
    return StageResult(status=status, checks=tuple(all_checks), message=message, ran_on=backend.where)


def stage(kind: str, beside: tuple[str, ...]) -> Stage:
    """The declaration of the smoke stage of ``kind``; it runs beside ``beside`` (it reads nothing they write; a
    failure among them still stops publish)."""
    return Stage(name=stage_name(kind), run=lambda ctx: run(ctx, kind), reads=reads(kind), beside=beside)
