"""build: compile the cell's wheel from a checkout, or pass a prebuilt wheel through.

Compile mode (the source stage gave ``checkout``): the toolchain is found and activated for this process only
(activate.py), the declared dependencies are fetched (downloads.py), the Plan's environment is applied as it
is written (``%VAR%`` references expanded on Windows; the CUDA root is the one found on this host; sccache
launchers only where sccache is installed), the checkout's build requirements are installed, and the Plan's build
command runs (``pip wheel . --no-build-isolation --no-deps`` or ``setup.py bdist_wheel``) with its output streamed
to ``build/<cell-id>/build.log`` and a live progress line, under the Plan's timeout.

Reads ``checkout`` (compile mode) or ``source_wheel`` (prebuilt mode, passed through); writes ``built_wheel`` (and
``build_log`` when it compiled).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import downloads, pip, signals
from torchbuild.host.build_runner import run_build
from torchbuild.host.checkout import Checkout
from torchbuild.host.console import console
from torchbuild.plan import Plan
from torchbuild.platforms.toolchain import ToolchainError
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context, Stage, companion_artifacts
from torchbuild.stages.build import companion
from torchbuild.stages.build.activate import Activation, activate
from torchbuild.wheel import wheelfile

NAME = "build"
LAUNCHERS = ("CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CMAKE_CUDA_COMPILER_LAUNCHER")
# Variables the toolchain activation owns: where this host keeps the CUDA the Plan names.
HOST_PATHS = ("CUDA_HOME", "CUDA_PATH")
REQUIREMENTS_FILES = ("requirements-build.txt", "requirements.txt")


def run(ctx: Context) -> StageResult:
    checkout = ctx.inputs.get("checkout")
    compiled = [package for package in ctx.plan.dependents if package.build is not None]
    toolchain = _toolchain(ctx) if checkout is not None or compiled else None
    if checkout is not None:
        assert toolchain is not None
        result = compile_checkout(ctx, Checkout.read(checkout.path), *toolchain)
    else:
        wheel = ctx.inputs.get("source_wheel")
        if wheel is None:
            raise StageFailed(NAME, "no wheel and no checkout from the source stage ('source_wheel'/'checkout' "
                              "missing)")  # fmt: skip
        result = StageResult(status="skipped", outputs={"built_wheel": wheel}, message="prebuilt wheel: nothing to "
                             "compile")  # fmt: skip
    if not compiled:
        return result
    assert toolchain is not None
    activation, env, _sccache, _notes = toolchain
    torch_wheel = result.outputs["built_wheel"].path
    outputs, said = dict(result.outputs), [result.message]
    for package in compiled:
        made, line = companion.compile_package(ctx, package, torch_wheel, activation, env)
        outputs.update(made)
        said.append(f"{package.name}: {line}")
    return StageResult(outputs=outputs, message="; ".join(said))


def _toolchain(ctx: Context) -> tuple[Activation, dict[str, str], str | None, list[str]]:
    """The toolchain activated for this cell's compiles (torch's, and each package's the Plan compiles beside it),
    the declared dependencies fetched, the environment torch's compile runs in, sccache where installed, and the
    notes on where that environment departs from the Plan's (said on the console)."""
    plan = ctx.plan
    try:
        activation = activate(plan, ctx.options.cache_dir, log=ctx.stage_dir("logs") / "provision.log")
    except ToolchainError as exc:
        raise StageFailed(NAME, str(exc)) from None
    assert activation.python is not None
    roots = {dep.name: downloads.fetch(dep, ctx.options.cache_dir) for dep in plan.build_deps}
    sccache = shutil.which("sccache", path=activation.env.get("PATH")) or shutil.which("sccache")
    env, notes = build_environment(plan, activation, roots, dict(os.environ), sccache is not None)
    notes = [*activation.notes, *notes]
    for line in (f"{r.name}: {r.detail}" for r in activation.requirements if r.found):
        console.print(f"    {line}", highlight=False)
    for note in notes:
        console.print(f"    [yellow]note:[/] {note}", highlight=False)
    return activation, env, sccache, notes


def build_command(plan: Plan, python: str, dist: Path) -> list[str]:
    if plan.build_kind == "setup-py":
        return [python, "setup.py", "bdist_wheel", "--dist-dir", str(dist)]
    # -v: without it pip hides the compiler's output, and the log would hold nothing to find an error in
    return [python, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "-v", "--wheel-dir", str(dist)]


def build_environment(
    plan: Plan,
    activation: Activation,
    dep_roots: Mapping[str, Path],
    base: Mapping[str, str],
    sccache: bool,
) -> tuple[dict[str, str], list[str]]:
    """The build process's environment: ``base`` + the toolchain's variables + the Plan's + the dependencies'.
    Returns it and notes on where it departs from the Plan's text (and why)."""
    env = {**base, **activation.env}
    notes = []
    for name, value in plan.env.items():
        if name in HOST_PATHS and activation.cuda_root is not None:
            continue  # the activation set it to the CUDA root found on this host
        if name in LAUNCHERS and not sccache:
            notes.append(f"{name} not set: sccache is not installed")
            continue
        env[name] = plan.platform_module.expand_env(value, env)
    for dep in plan.build_deps:
        env.update(downloads.environment(dep, dep_roots[dep.name], env))
    return env, notes


def compile_checkout(
    ctx: Context, checkout: Checkout, activation: Activation, env: dict[str, str], sccache: str | None,
    notes: list[str],
) -> StageResult:
    """torch compiled from ``checkout`` with the toolchain ``activation``, in ``env`` (``_toolchain``)."""
    plan = ctx.plan
    work = ctx.root / plan.work_dir
    log = work / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"# build of {plan.cell_id} from {checkout.path} ({checkout.origin})\n", encoding="utf-8")
    _log_environment(plan, activation, env, notes, log)
    assert activation.python is not None
    timeout_s = plan.build_timeout_hours * 3600
    source = Path(checkout.path)
    for name in REQUIREMENTS_FILES:
        if (source / name).is_file():
            argv = [activation.python, *pip.install_argv(["-r", name])]
            outcome = run_build(argv, cwd=source, env=env, log=log, timeout_s=timeout_s, label="requirements")
            if not outcome.ok:
                raise StageFailed(NAME, outcome.failure_message(f"pip install -r {name}", timeout_s))
            break
    dist = ctx.stage_dir(NAME) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    argv = build_command(plan, activation.python, dist)
    outcome = run_build(argv, cwd=source, env=env, log=log, timeout_s=timeout_s, label=f"build {plan.cell_id}")
    if sccache:
        _sccache_stats(sccache, env, log)
    if not outcome.ok:
        raise StageFailed(NAME, outcome.failure_message(f"the build ({plan.build_kind})", timeout_s))
    wheel = companion.the_one_wheel(dist, "the build succeeded but", log)
    if checkout.kind == "pytorch":
        with as_stage_failure(NAME, wheelfile.WheelError):
            wheelfile.validate(wheel, plan.expected_wheel())
    minutes = outcome.seconds / 60
    return StageResult(
        outputs={"built_wheel": Artifact.of(wheel), "build_log": Artifact.of(log)},
        message=f"compiled {wheel.name} in {minutes:.1f} min; log {log}",
    )


def _log_environment(plan: Plan, activation: Activation, env: Mapping[str, str], notes: list[str], log: Path) -> None:
    """The environment contract, in the log: a failed build starts with what it was given."""
    keys = sorted({*plan.env, *HOST_PATHS, *(k for d in plan.build_deps for k in d.env)} & set(env))
    lines = [f"{k}={env[k]}" for k in keys]
    found = [f"{r.name}: {r.detail}" for r in activation.requirements if r.found]
    with log.open("a", encoding="utf-8") as handle:
        handle.write("# toolchain\n" + "".join(f"#   {line}\n" for line in found))
        handle.write("# environment (the Plan's, as applied)\n" + "".join(f"#   {line}\n" for line in lines))
        handle.write("".join(f"# note: {n}\n" for n in notes))


def _sccache_stats(sccache: str, env: Mapping[str, str], log: Path) -> None:
    proc = signals.run([sccache, "--show-stats"], capture_output=True, text=True, errors="replace", env=dict(env),
                       check=False)  # fmt: skip
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ sccache --show-stats\n{proc.stdout}{proc.stderr}")
    wanted = ("cache hits", "cache misses")
    hits = [line.strip() for line in proc.stdout.splitlines() if line.lower().startswith(wanted)]
    console.print(f"    sccache: {'; '.join(' '.join(h.split()) for h in hits) or proc.stdout.strip()[:200]}")


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("source_wheel", "checkout", *companion_artifacts("checkout")),
    writes=("built_wheel", "build_log", *companion_artifacts("built_wheel", "build_log")),
    shaped_by=("source_kind",),
)
