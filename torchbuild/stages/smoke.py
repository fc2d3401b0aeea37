"""smoke: the artifacts proven in fresh environments.

Two environments, each built fresh under the stage directory:

- wheel: ``python -m venv`` from the host Python, then one ``pip install <repaired wheel> numpy`` (its
  dependencies from the configured package indexes; numpy for the interop checks).
- conda: a venv as the prefix (its python is the venv's), the conda package linked into it by py-rattler's
  ``install``, then the wheel's own requirements and numpy pip-installed beside it.

In each, ``smoke_checks.py`` runs from an empty working directory, each check in its own process, and every
check becomes a named ``Check`` ("wheel: import", "conda: dataloader spawn", ...). A failed check fails the stage;
the failing environment is kept for debugging. Where this host cannot run the target (win-64 on Linux, or no
interpreter for the Plan's Python), the stage is skipped and no check is reported as passed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchbuild import pip, rattler_child, smoke_checks
from torchbuild.errors import StageFailed, UserError
from torchbuild.plan import Plan
from torchbuild.proc import run_tool
from torchbuild.results import Check, StageResult, Status, sha256_of
from torchbuild.stages import Context, Stage

NAME = "smoke"
INPUTS = {"wheel": "repaired_wheel", "conda": "conda_package"}  # environment -> the artifact installed into it
ENVS = tuple(INPUTS)
STATUSES: dict[str, Status] = {"passed": "passed", "failed": "failed", "skipped": "skipped"}
PIP_TIMEOUT_S = 1800.0
INSTALL_TIMEOUT_S = 900.0
# Every check runs in its own process (import torch: seconds); the DataLoader spawns two more.
CHECKS_TIMEOUT_S = smoke_checks.CHECK_TIMEOUT_S * len(smoke_checks.CHECKS)


@dataclass(frozen=True)
class Env:
    """One fresh environment and what it was made from."""

    kind: str  # wheel | conda
    root: Path  # everything of this environment: the venv, the empty working directory, the package cache
    artifact: Path  # the wheel or the .conda installed into it
    log: Path

    @property
    def prefix(self) -> Path:
        return self.root / "venv"

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    @property
    def python(self) -> Path:
        return self.prefix / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


# --- can this host run the target? ----------------------------------------------------------------------


def host_platform() -> str:
    from rattler.platform import Subdir

    return str(Subdir.current())


def find_python(version: str) -> str | None:
    """An interpreter of this X.Y: the one running torchbuild, else ``pythonX.Y`` on PATH if it really is one
    (a pyenv shim for a version that is not active is on PATH but fails)."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    candidate = shutil.which(f"python{version}")
    if candidate is None:
        return None
    try:
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return candidate if probe.returncode == 0 and probe.stdout.strip() == version else None


def _skipped(reason: str) -> StageResult:
    checks = tuple(
        Check(name=f"{env}: {name}", status="skipped", message=f"skipped: {reason}")
        for env in ENVS
        for name in smoke_checks.CHECKS
    )
    short = reason.split(" (")[0]
    return StageResult(status="skipped", checks=checks, message=f"skipped: {short}")


# --- setting up the environments -------------------------------------------------------------------------


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


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist, minus those only for extras (pip evaluates the other markers)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise StageFailed(NAME, f"{wheel.name} has {len(names)} .dist-info/METADATA files, not 1")
            metadata = Parser().parsestr(archive.read(names[0]).decode("utf-8"))
    except (OSError, zipfile.BadZipFile) as exc:
        raise StageFailed(NAME, f"cannot read {wheel}: {exc}") from None
    requirements = []
    for line in metadata.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise StageFailed(NAME, f"{wheel.name}: invalid Requires-Dist '{line}': {exc}") from None
        if requirement.marker is None or "extra" not in str(requirement.marker):
            requirements.append(line)
    return requirements


def _fresh(env: Env) -> None:
    if env.root.exists():
        shutil.rmtree(env.root)
    env.cwd.mkdir(parents=True)


def _make_venv(env: Env, python: str) -> None:
    run_tool([python, "-m", "venv", env.prefix], stage=NAME, log=env.log, what=f"python -m venv {env.prefix}")


def _pip_install(env: Env, args: Sequence[str]) -> None:
    pip.install(env.python, args, log=env.log, timeout=PIP_TIMEOUT_S)


def _purelib(env: Env) -> Path:
    out = run_tool(
        [env.python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        stage=NAME,
        log=env.log,
        what=f"{env.python} (site-packages)",
    )
    return Path(out.strip().splitlines()[-1])


def setup_wheel_env(env: Env, python: str) -> str:
    _fresh(env)
    _make_venv(env, python)
    _pip_install(env, [str(env.artifact), "numpy"])
    return f"fresh venv + pip install {env.artifact.name} numpy"


def setup_conda_env(env: Env, python: str, plan: Plan, wheel: Path) -> str:
    _fresh(env)
    _make_venv(env, python)
    site_packages = env.prefix / plan.conda.site_packages
    if _purelib(env).resolve() != site_packages.resolve():
        raise StageFailed(
            NAME,
            f"the venv's site-packages is {_purelib(env)}, but {env.artifact.name} puts its "
            f"files under {plan.conda.site_packages}: the package would not be importable",
        )
    try:
        installed = rattler_child.call(
            "install_archive",
            timeout=INSTALL_TIMEOUT_S,
            archive=str(env.artifact),
            prefix=str(env.prefix),
            cache_dir=str(env.root / "pkgs"),
        )
    except rattler_child.RattlerError as exc:
        raise StageFailed(NAME, f"rattler install of {env.artifact.name} into {env.prefix} failed: {exc}") from None
    with env.log.open("a", encoding="utf-8") as handle:
        handle.write(f"rattler install {env.artifact} -> {env.prefix}: {installed['record']}\n")
    # Only the pytorch package comes from a conda file: its dependencies (sympy, filelock, ...) have no
    # package files here (the repodata is metadata only), so the wheel's own requirements come from pip. pip
    # sees the conda-installed torch by its .dist-info and leaves it alone; conda_origin() proves that.
    requirements = [r for r in wheel_requirements(wheel) if canonicalize_name(Requirement(r).name) != "torch"]
    _pip_install(env, [*requirements, "numpy"])
    origin = conda_origin(env, plan)
    from_pip = {canonicalize_name(Requirement(r).name) for r in requirements}
    not_from_pip = [d for d in installed["depends"] if canonicalize_name(d.split()[0]) not in from_pip]
    return (
        f"venv prefix + rattler install {env.artifact.name} ({origin}) + pip install of the wheel's "
        f"requirements and numpy; conda-only dependencies not installed: {', '.join(not_from_pip) or 'none'}"
    )


def conda_origin(env: Env, plan: Plan) -> str:
    """Prove that torch in the prefix is the conda package's: its conda-meta record lists torch/__init__.py
    with the sha256 of the file that is there now (after pip ran)."""
    conda = plan.conda
    record_path = env.prefix / "conda-meta" / f"{conda.name}-{conda.version}-{conda.build_string}.json"
    if not record_path.is_file():
        found = sorted(p.name for p in (env.prefix / "conda-meta").glob("*.json"))
        raise StageFailed(
            NAME,
            f"installing {env.artifact.name} left no {record_path} (conda-meta has: "
            f"{', '.join(found) or 'nothing'}): the package's name, version or build string "
            "differ from the Plan",
        )
    record: dict[str, Any] = json.loads(record_path.read_text(encoding="utf-8"))
    init = f"{conda.site_packages}/torch/__init__.py"
    entries = {p["_path"]: p for p in record.get("paths_data", {}).get("paths", [])}
    if init not in entries:
        raise StageFailed(NAME, f"{env.artifact.name} does not contain {init} (per {record_path})")
    actual = sha256_of(env.prefix / init)
    if entries[init].get("sha256") != actual:
        raise StageFailed(
            NAME,
            f"{env.prefix / init} is not the file from {env.artifact.name} (sha256 {actual}, "
            f"the package's {entries[init].get('sha256')}): pip replaced it",
        )
    return f"conda-meta/{record_path.name}: {len(entries)} files, torch/__init__.py sha256 matches"


# --- running the checks ----------------------------------------------------------------------------------


def expect_args(plan: Plan, torch_file: Path) -> list[str]:
    args = ["--expect-version", plan.version, "--expect-cuda", plan.cuda, "--expect-torch-file", str(torch_file)]
    if plan.is_cuda and plan.cudnn is not None:
        args += ["--expect-cudnn", str(plan.cudnn)]
    return args


def parse_results(kind: str, stdout: str, artifact: str) -> list[Check]:
    """smoke_checks.py's JSON lines -> named Checks; a check without a result line is a failure."""
    results: dict[str, Mapping[str, str]] = {}
    for line in stdout.splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("check") in smoke_checks.CHECKS:
            results[result["check"]] = result
    checks = []
    for name in smoke_checks.CHECKS:
        result = results.get(name)
        if result is None:
            checks.append(
                Check(
                    name=f"{kind}: {name}",
                    status="failed",
                    message="no result (smoke_checks.py stopped before this check)",
                    file=artifact,
                )
            )
            continue
        message = str(result.get("message", ""))
        status = STATUSES.get(str(result.get("status")))
        if status is None:
            status, message = "failed", f"unknown status {result.get('status')!r}: {message}"
        if status == "failed" and result.get("output"):
            message = f"{message}\n{result['output']}"
        checks.append(Check(name=f"{kind}: {name}", status=status, message=message, file=artifact))
    return checks


def run_checks(env: Env, plan: Plan) -> list[Check]:
    """smoke_checks.py, copied beside the environment, run by its python from an empty working directory."""
    # In a folder of its own: the script's folder is sys.path[0] of every check process.
    script = env.root / "checks" / "smoke_checks.py"
    script.parent.mkdir()
    shutil.copyfile(Path(smoke_checks.__file__), script)
    torch_file = _purelib(env) / "torch" / "__init__.py"
    argv = [str(env.python), str(script), *expect_args(plan, torch_file)]
    try:
        proc = subprocess.run(
            argv,
            cwd=env.cwd,
            env=smoke_checks.clean_env(),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CHECKS_TIMEOUT_S,
            check=False,
        )
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = f"[timed out after {CHECKS_TIMEOUT_S:.0f} s]"
    with env.log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ (cd {env.cwd}; {' '.join(argv)})\n{stdout}\n{stderr}\n")
    leftovers = sorted(p.name for p in env.cwd.iterdir())
    checks = parse_results(env.kind, stdout, env.artifact.name)
    if leftovers:  # a check that writes into the user's working directory would be a bug worth seeing
        checks.append(
            Check(
                name=f"{env.kind}: empty cwd",
                status="failed",
                message=f"the checks left files in the working directory: {', '.join(leftovers)}",
            )
        )
    return checks


def _failure(env: Env, checks: Sequence[Check], all_checks: Sequence[Check]) -> StageFailed:
    failed = [c for c in checks if c.status == "failed"]
    first = failed[0]
    where = "a fresh venv" if env.kind == "wheel" else "a fresh conda prefix"
    lines = [f"{first.name} failed in {where} with {env.artifact.name}: {first.message}"]
    lines += [f"also failed: {c.name}: {c.message.splitlines()[0]}" for c in failed[1:]]
    lines.append(f"The environment is kept for debugging: {env.root} (log: {env.log})")
    return StageFailed(NAME, "\n".join(lines), all_checks)


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    host = host_platform()
    if plan.platform != host:
        return _skipped(f"needs a {plan.platform} host (this host is {host})")
    python = find_python(plan.python)
    if python is None:
        return _skipped(f"needs Python {plan.python} on this host (no working python{plan.python} on PATH)")
    paths = _inputs(ctx)
    base = ctx.stage_dir(NAME)
    logs = ctx.stage_dir("logs")
    envs = [Env(kind, base / kind, paths[kind], logs / f"smoke-{kind}.log") for kind in ENVS]
    all_checks: list[Check] = []
    for env in envs:
        env.log.unlink(missing_ok=True)
        started = time.perf_counter()
        try:
            if env.kind == "wheel":
                what = setup_wheel_env(env, python)
            else:
                what = setup_conda_env(env, python, plan, paths["wheel"])
        except UserError as exc:  # a StageFailed of this stage, or pip's error
            message = str(exc).removeprefix(f"{NAME}: ")
            setup = Check(name=f"{env.kind}: install", status="failed", message=message, file=env.artifact.name)
            all_checks.append(setup)
            kept = f"The environment is kept for debugging: {env.root}"
            raise StageFailed(NAME, f"{setup.name} failed: {setup.message}\n{kept}", all_checks) from None
        took = time.perf_counter() - started
        all_checks.append(
            Check(name=f"{env.kind}: install", status="passed", message=f"{what}: {took:.1f} s", file=env.artifact.name)
        )
        checks = run_checks(env, plan)
        all_checks += checks
        if any(c.status == "failed" for c in checks):
            raise _failure(env, checks, all_checks)
    for env in envs:
        shutil.rmtree(env.root, ignore_errors=True)
    ran = [c for c in all_checks if not c.name.endswith(": install")]
    passed = sum(c.status == "passed" for c in ran)
    skipped = [c for c in ran if c.status == "skipped"]
    message = f"{passed}/{len(ran)} checks passed in a fresh venv and a fresh conda prefix"
    if skipped:
        message += "; skipped: " + ", ".join(
            f"{c.name} ({c.message.removeprefix('skipped ').strip('()')})" for c in skipped
        )
    return StageResult(status="passed", checks=tuple(all_checks), message=message)


STAGE = Stage(name=NAME, run=run, reads=tuple(INPUTS.values()))
