"""The compile of each package the Plan builds beside torch from a checkout (``ShippedPackage.build``: a companion
named with ``packages: {torchvision: {git_ref: v0.28.0}}``, ``--companion-source``, ``--companion-ref``), against
the cell's own torch wheel, by the same path as torch's compile (stage.py):

- the toolchain activated for the build process only (activate.py: gcc on Linux; on Windows the MSVC toolset the
  Plan names, through vcvarsall.bat, with ``DISTUTILS_USE_SDK`` so that setuptools takes it), the Plan's environment
  applied (``MAX_JOBS``, the compiler cache's launchers where sccache is installed) and the package's own variables
  added (companions.yaml ``checkout``: ``BUILD_VERSION``, the version the Plan read from the checkout;
  ``PYTORCH_VERSION``, the cell's exact torch, which its setup.py pins in Requires-Dist);
- a fresh environment of the Plan's Python (``uv venv``) with the cell's torch wheel (the one the later stages
  ship, not a torch of the host's) and the checkout's build requirements (pyproject.toml's ``[build-system]
  requires``, torch left out), then ``pip wheel . --no-build-isolation --no-deps``, streamed to
  ``build/<cell-id>/build-<name>.log`` under the Plan's timeout;
- the wheel checked: its project, the version the Plan says, the cell's Python tags, and its Requires-Dist on torch
  exactly the cell's torch (``torch==2.13.0+cpu``): a setup.py that pins none is given the pin, said so.

Writes ``built_wheel[<name>]`` and ``build_log[<name>]``.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchbuild.errors import StageFailed, as_stage_failure
from torchbuild.host import checkout, uv
from torchbuild.host.build_runner import run_build
from torchbuild.knowledge.companions import TORCH
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.results import Artifact
from torchbuild.stages import Context, package_artifact
from torchbuild.stages.build.activate import Activation
from torchbuild.wheel import rewrite, wheelfile

NAME = "build"


def environment(torch_env: Mapping[str, str], package: ShippedPackage) -> dict[str, str]:
    """The build process's environment for ``package``: torch's compile's (``torch_env``, stage.build_environment:
    the host's, the toolchain's variables, the Plan's) with the package's own (its version, its pin of the cell's
    torch)."""
    assert package.build is not None
    return {**torch_env, **package.build.env}


def python_in(env_dir: Path) -> Path:
    """The interpreter of the environment at ``env_dir`` on this host."""
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def build_command(python: Path, dist: Path) -> list[str]:
    """What compiles the checkout in its folder (``pip wheel``, as torch's pip-wheel builds)."""
    return [str(python), "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "-v", "--wheel-dir", str(dist)]


def requirements(source: Path) -> list[str]:
    """What the build environment gets besides the cell's torch wheel: pip (which builds) and the checkout's build
    requirements, torch left out (it is the cell's)."""
    wanted = []
    for text in checkout.build_requires(source):
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement as exc:
            raise StageFailed(NAME, f"{source / 'pyproject.toml'}: build requirement {text!r}: {exc}") from None
        if name != TORCH:
            wanted.append(text)
    return ["pip", *wanted]


def compile_package(
    ctx: Context, package: ShippedPackage, torch_wheel: Path, activation: Activation, torch_env: Mapping[str, str]
) -> tuple[dict[str, Artifact], str]:
    """``package`` compiled from its checkout (the source stage's ``checkout[<name>]``) against ``torch_wheel`` with
    the toolchain ``activation`` and torch's compile's environment ``torch_env``: its outputs and the stage's line
    about it."""
    plan, build = ctx.plan, package.build
    assert build is not None and activation.python is not None
    described = ctx.inputs.get(package_artifact("checkout", package))
    if described is None:
        raise StageFailed(NAME, f"no checkout of {package.name} from the source stage ('checkout[{package.name}]')")
    source = Path(checkout.Checkout.read(described.path).path)
    log = ctx.root / plan.work_dir / f"build-{package.name}.log"
    log.write_text(f"# build of {package.name} {build.version} from {build.origin}, against {torch_wheel.name}\n",
                   encoding="utf-8")  # fmt: skip
    work = ctx.stage_dir(NAME) / package.name
    shutil.rmtree(work, ignore_errors=True)
    env_dir, dist = work / "env", work / "dist"
    dist.mkdir(parents=True)
    wanted = requirements(source)
    try:
        uv.venv(env_dir, activation.python, log)
        uv.install_own(python_in(env_dir), torch_wheel, unpack_cache=work / "uv-cache", log=log)
        uv.install(python_in(env_dir), [str(torch_wheel), *wanted], log=log)
    except uv.UvError as exc:
        raise StageFailed(NAME, f"{package.name}: the build environment (the cell's torch, {', '.join(wanted)}) "
                                f"cannot be made: {exc}; see {log}") from None  # fmt: skip
    env = environment(torch_env, package)
    with log.open("a", encoding="utf-8") as handle:
        handle.write("".join(f"# {k}={v}\n" for k, v in sorted(build.env.items())))
    timeout_s = plan.build_timeout_hours * 3600
    argv = build_command(python_in(env_dir), dist)
    outcome = run_build(argv, cwd=source, env=env, log=log, timeout_s=timeout_s, label=f"build {package.name}")
    if not outcome.ok:
        raise StageFailed(NAME, outcome.failure_message(f"the build of {package.name}", timeout_s))
    built = the_one_wheel(dist, f"the build of {package.name}", log)
    with as_stage_failure(NAME, wheelfile.WheelError):
        wheelfile.validate(built, expected(plan, package))
    wheel, pinned = pin_torch(built, plan.version)
    for made in (env_dir, work / "uv-cache"):
        shutil.rmtree(made, ignore_errors=True)
    minutes = outcome.seconds / 60
    outputs = {package_artifact("built_wheel", package): Artifact.of(wheel),
               package_artifact("build_log", package): Artifact.of(log)}  # fmt: skip
    return outputs, f"compiled {wheel.name} against {torch_wheel.name} in {minutes:.1f} min ({pinned}); log {log}"


def the_one_wheel(dist: Path, build: str, log: Path) -> Path:
    """The wheel a build left in ``dist``: exactly one, or the stage fails naming what it found."""
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        found = ", ".join(w.name for w in wheels) or "none"
        raise StageFailed(NAME, f"{build} left {len(wheels)} wheels in {dist} ({found}); see {log}")
    return wheels[0]


def expected(plan: Plan, package: ShippedPackage) -> wheelfile.Expected:
    """What ``package``'s built wheel must be: its project, the version the Plan read from the checkout, the cell's
    Python tags (any platform tag the repair can make the cell's)."""
    assert package.build is not None
    return wheelfile.Expected(
        version=package.build.version, tags=plan.wheel_tags, platform=plan.platform, cell_id=plan.cell_id,
        wheel=package.wheel, distribution=package.name,
    )  # fmt: skip


def pin_torch(wheel: Path, torch_version: str) -> tuple[Path, str]:
    """``wheel`` whose Requires-Dist on torch is exactly ``torch==<torch_version>`` (the cell's torch): as built where
    its setup.py pinned it so, else rewritten with that pin (said)."""
    pin = f"{TORCH}=={torch_version}"
    with as_stage_failure(NAME, wheelfile.WheelError):
        name = wheelfile.parse_name(wheel)
        with wheelfile.open_wheel(wheel) as archive:
            member = f"{wheelfile.dist_info_dir(archive, name)}/METADATA"
            metadata = archive.read(member)
        kept, dropped = wheelfile.without_requirements(metadata, {TORCH})
    if dropped == [pin]:
        return wheel, f"Requires-Dist {pin}, as its setup.py wrote it"
    pinned, _ = wheelfile.with_requirements(kept, [pin])
    made = wheel.with_name(f".{wheel.name}.pinned")
    try:
        rewrite.rewrite(wheel, made, files={member: pinned})
    except (rewrite.RewriteError, OSError, zipfile.BadZipFile) as exc:
        raise StageFailed(NAME, f"cannot pin torch in {wheel.name}'s METADATA: {exc}") from None
    made.replace(wheel)
    was = ", ".join(dropped) or "no requirement on torch"
    return wheel, f"Requires-Dist {pin} (its setup.py wrote {was})"
