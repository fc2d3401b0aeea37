"""The smoke environments on the host itself (a linux-64 cell on Linux, a win-64 cell on Windows):

- wheel: a fresh venv (``uv venv``) from the host's Python of the Plan's version, the repaired wheel (and its
  companions) installed alone, each unpacked into its content's own cache (by_content.py), then ``uv pip install
  <repaired wheel> numpy`` (its dependencies from pip's configured package indexes; numpy pinned as smoke_envs.yaml
  says). uv does in seconds what ``python -m venv`` and pip take a minute for (torchbuild/host/uv.py).
- conda: a venv as the prefix (its python is the venv's), the conda package linked into it by py-rattler's
  ``install``, then the wheel's own requirements and numpy installed beside it the same way.

In each, smoke_checks.py runs (through run_checks.py) from an empty working directory with the environment's python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from torchbuild.conda import rattler_child
from torchbuild.config import nesting
from torchbuild.host import signals, uv
from torchbuild.host.platform import wine_version
from torchbuild.host.proc import run_tool
from torchbuild.results import Check, sha256_of
from torchbuild.stages.smoke import by_content, user_test
from torchbuild.stages.smoke.env import (
    CHECKS_TIMEOUT_S,
    BackendError,
    Env,
    expect_args,
    harness_end,
    installed_requires,
    leftovers,
    log_run,
    not_started,
    parse_results,
    retried,
    started_twice,
)
from torchbuild.stages.smoke.resources import compile_results, consumer_cache, smoke_checks
from torchbuild.stages.smoke.resources.smoke_base import NotStarted
from torchbuild.stages.smoke.wine import conda_library_bin
from torchbuild.wheel import wheelfile

if TYPE_CHECKING:
    from torchbuild.config.user_tests import UserTest
    from torchbuild.plan import Plan

INSTALL_TIMEOUT_S = 900.0
KINDS = {"wheel": "a fresh venv", "conda": "a fresh conda prefix"}


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist, minus those only for extras (pip evaluates the other markers)."""
    try:
        metadata = wheelfile.read_metadata(wheel)
    except wheelfile.WheelError as exc:
        raise BackendError(f"cannot read {wheel}: {exc}") from None
    return _without_extras(metadata.get_all("Requires-Dist") or [], wheel.name)


def pip_requirements(torch_requires: Sequence[str], companions: Mapping[str, Sequence[str]]) -> list[str]:
    """What pip installs beside the conda-installed torch and ``companions`` (name -> its Requires-Dist): their
    requirements but those only for extras and the conda-installed projects, each line once."""
    from_conda = {"torch", *(canonicalize_name(name) for name in companions)}
    beside = [line for name, lines in companions.items() for line in _without_extras(lines, f"{name}'s METADATA")]
    lines = dict.fromkeys([*_without_extras(torch_requires, "torch's METADATA"), *beside])
    return [line for line in lines if canonicalize_name(Requirement(line).name) not in from_conda]


def _without_extras(lines: Sequence[str], source: str) -> list[str]:
    requirements = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise BackendError(f"{source}: invalid Requires-Dist '{line}': {exc}") from None
        if requirement.marker is None or "extra" not in str(requirement.marker):
            requirements.append(line)
    return requirements


def _rattler_install(env: Env, archive: Path, beside: Sequence[Path] = ()) -> dict[str, Any]:
    """One conda package, and the packages ``beside`` it, linked into the environment's prefix in one transaction
    by py-rattler (a child process); what it returns describes ``archive``."""
    try:
        installed: dict[str, Any] = rattler_child.call(
            "install_archive",
            timeout=INSTALL_TIMEOUT_S,
            archive=str(archive),
            prefix=str(prefix(env)),
            cache_dir=str(env.root / "pkgs"),
            beside=[str(path) for path in beside],
        )
    except rattler_child.RattlerError as exc:
        raise BackendError(f"rattler install of {archive.name} into {env.root} failed: {exc}") from None
    with env.log.open("a", encoding="utf-8") as handle:
        handle.write(f"rattler install {archive} -> {prefix(env)}: {installed['record']}\n")
    return installed


def prefix(env: Env) -> Path:
    return env.root / "venv"


def python_of(env: Env) -> Path:
    return prefix(env) / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@dataclass(frozen=True)
class VenvBackend:
    plan: Plan
    python: str  # the host interpreter of the Plan's X.Y
    wheel: Path  # the repaired wheel (the conda environment takes its requirements from it)
    # where the C++ consumer's compiles (smoke-consumer/) and torch.compile's checks (smoke-compiled/) are shared,
    # and a win-64 conda prefix's Library\bin DLLs' vendor wheels are cached
    cache_dir: Path | None = None

    @property
    def where(self) -> str:
        version = signals.run(
            [self.python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, errors="replace", check=False,
        ).stdout.strip()  # fmt: skip
        wine = wine_version()
        under = f" under Wine {wine}" if wine else ""
        return f"on this {self.plan.platform} host{under} (Python {version or self.plan.python})"

    def describe(self, kind: str) -> str:
        return KINDS[kind]

    def extras(self) -> list[str]:
        """What the environment gets besides the artifacts: smoke_envs.yaml's numpy and extras (a Windows host under
        Wine takes the rows for Wine: numpy >= 2.1 imports complex-math functions that are stubs in Wine 8.0's
        ucrtbase), and the matrix's test_requires."""
        windows = self.plan.windows
        chosen = (windows.smoke_extras_wine if windows else ()) if wine_version() else self.plan.smoke_extras
        test = self.plan.user_test
        return [w.requirement for w in chosen] + list(test.requires if test else ())

    def setup(self, env: Env) -> str:
        env.fresh()
        try:
            uv.venv(prefix(env), self.python, env.log)
        except uv.UvError as exc:
            raise BackendError(f"cannot make the venv {prefix(env)}: {exc}") from None
        if env.kind == "wheel":
            beside = [str(path) for path in env.companions.values()]
            for wheel in [env.artifact, *env.companions.values()]:  # each unpacked into its content's own cache
                _install_own(env, wheel)
            _pip_install(env, [str(env.artifact), *beside, *self.extras()])  # what they require, from the indexes
            names = " ".join([env.artifact.name, *(Path(p).name for p in beside), *self.extras()])
            return f"fresh venv + uv pip install {names}"
        return self._conda(env)

    def _conda(self, env: Env) -> str:
        plan = self.plan
        site_packages = prefix(env) / plan.conda.site_packages
        if _purelib(env).resolve() != site_packages.resolve():
            raise BackendError(f"the venv's site-packages is {_purelib(env)}, but {env.artifact.name} puts its "
                f"files under {plan.conda.site_packages}: the package would not be importable",
            )
        # the companions beside it, as conda links them into one prefix
        installed = _rattler_install(env, env.artifact, list(env.companions.values()))
        # Only the pytorch package (and its companions) come from conda files: their dependencies (sympy, filelock,
        # torchvision's pillow, ...) have no package files here (the repodata is metadata only), so the wheels' own
        # requirements come from pip. pip sees the conda-installed torch by its .dist-info and leaves it alone;
        # conda_origin() proves that.
        beside = {name: installed_requires(site_packages, name) for name in env.companions}
        requirements = pip_requirements(wheel_requirements(self.wheel), beside)
        _pip_install(env, [*requirements, *self.extras()])
        library_bin = ""
        if plan.platform_module.conda_windows_layout and self.cache_dir is not None:
            # torch imports from Library\bin what its run dependencies install there (intel-openmp's libiomp5md.dll);
            # rattler installed the package alone, so they come from their vendor wheels, as under Wine.
            library_bin = f"; Library\\bin: {conda_library_bin(plan, prefix(env), self.cache_dir, env.log).describe()}"
        origin = conda_origin(env, plan)
        from_pip = {canonicalize_name(Requirement(r).name) for r in requirements}
        not_from_pip = [d for d in installed["depends"] if canonicalize_name(d.split()[0]) not in from_pip]
        return (
            f"venv prefix + rattler install {' '.join([env.artifact.name, *(p.name for p in env.companions.values())])}"
            f" ({origin}) + uv pip install of the wheels' "
            f"requirements and numpy; conda-only dependencies not installed: {', '.join(not_from_pip) or 'none'}"
            f"{library_bin}"
        )

    def run_checks(self, env: Env) -> list[Check]:
        script = env.checks_script()
        torch_file = _purelib(env) / "torch" / "__init__.py"
        argv = [str(python_of(env)), str(script), *expect_args(self.plan, str(torch_file), list(env.companions))]
        environ = smoke_checks.clean_env()
        if self.cache_dir is not None:  # the C++ consumer's compile and torch.compile's check, once per content
            environ[consumer_cache.SHARED_ENV] = str(self.cache_dir / "smoke-consumer")
            environ[compile_results.SHARED_ENV] = str(self.cache_dir / "smoke-compiled")
        companions = list(env.companions)
        try:
            proc, retry = started_twice(lambda: signals.run(argv, cwd=env.cwd, env=environ, capture_output=True,
                                                            text=True, errors="replace", timeout=CHECKS_TIMEOUT_S))
            stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            stderr, code, retry = f"{stderr}\n[timed out after {CHECKS_TIMEOUT_S:.0f} s]", None, ""
        except NotStarted as exc:
            log_run(env, argv, "", f"[could not be started: {exc}]")
            return not_started(env.kind, env.artifact.name, companions, exc) + leftovers(env)
        log_run(env, argv, stdout, stderr)
        ended = harness_end(code, CHECKS_TIMEOUT_S, stderr)
        return retried(parse_results(env.kind, stdout, env.artifact.name, companions, ended), retry) + leftovers(env)

    def run_user_test(self, env: Env, test: UserTest) -> Check:
        return user_test.check(env, test, lambda argv, cwd: run_command(env, argv, cwd))

    def close(self) -> None:
        return None


def run_command(env: Env, argv: list[str], cwd: Path) -> user_test.Ran:
    """One command of the user test, without a shell: the environment's bin folder first on PATH, ``python`` its
    interpreter."""
    bin_dir = python_of(env).parent
    environ = smoke_checks.clean_env()
    environ.update(PATH=os.pathsep.join([str(bin_dir), environ.get("PATH", os.defpath)]), VIRTUAL_ENV=str(prefix(env)))
    # Looked up here: Windows' CreateProcess would search this process's PATH, not the one given to the child.
    program = str(python_of(env)) if argv[0] == "python" else shutil.which(argv[0], path=environ["PATH"])
    if program is None:
        return user_test.Ran(None, "", f"'{argv[0]}' is not in the environment ({bin_dir}) nor on this host's PATH")
    try:
        proc = signals.run([program, *argv[1:]], cwd=cwd, env=environ, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                              timeout=user_test.TIMEOUT_S, check=False)  # fmt: skip
    except FileNotFoundError:
        return user_test.Ran(None, "", f"'{argv[0]}' is not in the environment ({bin_dir}) nor on this host's PATH")
    except PermissionError as exc:
        return user_test.Ran(None, "", f"'{argv[0]}' cannot be run: {exc.strerror}")
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
        return user_test.Ran(None, output, f"timed out after {user_test.TIMEOUT_S:.0f} s")
    return user_test.Ran(proc.returncode, proc.stdout)


def _pip_install(env: Env, args: list[str]) -> None:
    try:
        uv.install(python_of(env), args, log=env.log)
    except uv.UvError as exc:
        raise BackendError(f"installing {' '.join(args)} into {prefix(env)} failed: {exc}") from None


def _install_own(env: Env, wheel: Path) -> None:
    try:
        uv.install_own(python_of(env), wheel, unpack_cache=by_content.unpack_cache(wheel, env.root / "uv-cache"),
                       log=env.log)  # fmt: skip
    except uv.UvError as exc:
        raise BackendError(f"installing {wheel.name} into {prefix(env)} failed: {exc}") from None


def _purelib(env: Env) -> Path:
    out = run_tool(
        [python_of(env), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        log=env.log,
        what=f"{python_of(env)} (site-packages)",
    )
    return Path(out.strip().splitlines()[-1])


def conda_origin(env: Env, plan: Plan) -> str:
    """Prove that torch in the prefix is the conda package's: its conda-meta record lists torch/__init__.py
    with the sha256 of the file that is there now (after pip ran)."""
    conda = plan.root.conda
    record_path = prefix(env) / "conda-meta" / f"{conda.name}-{conda.version}-{conda.build_string}.json"
    if not record_path.is_file():
        found = sorted(p.name for p in (prefix(env) / "conda-meta").glob("*.json"))
        raise BackendError(f"installing {env.artifact.name} left no {record_path} (conda-meta has: "
            f"{', '.join(found) or 'nothing'}): the package's name, version or build string "
            "differ from the Plan",
        )
    record: dict[str, Any] = nesting.loads(record_path.read_text(encoding="utf-8"))
    init = f"{plan.conda.site_packages}/torch/__init__.py"
    entries = {p["_path"]: p for p in record.get("paths_data", {}).get("paths", [])}
    if init not in entries:
        raise BackendError(f"{env.artifact.name} does not contain {init} (per {record_path})")
    actual = sha256_of(prefix(env) / init)
    if entries[init].get("sha256") != actual:
        raise BackendError(f"{prefix(env) / init} is not the file from {env.artifact.name} (sha256 {actual}, "
            f"the package's {entries[init].get('sha256')}): pip replaced it",
        )
    return f"conda-meta/{record_path.name}: {len(entries)} files, torch/__init__.py sha256 matches"
