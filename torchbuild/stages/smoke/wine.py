"""The smoke environments of a win-64 cell on a Linux host: python.org's embeddable CPython for Windows of the Plan's
Python (python_embed.py, pinned by sha256), run under Wine (wine.py) with the Microsoft VC runtime native-only, so
a wheel without it fails as on a clean Windows machine.

- wheel: the embeddable CPython with the repaired wheel and its Windows dependencies unpacked into
  ``Lib\\site-packages`` (Requires-Dist evaluated for the Windows target, win_amd64 wheels:
  platforms/windows/dependencies.py) and numpy's win_amd64 wheel (smoke_envs.yaml pins it per torch/Python range,
  with the reason).
- conda: the conda layout (platforms/windows/environments.py): the package's files where conda puts them and
  ``Library\\bin`` with what its run dependencies install, taken from the vendor wheels; the same dependencies and
  numpy beside it. Besides the checks, ``torchrun --help`` runs through the package's ``Scripts\\torchrun.exe``.

The checks are smoke_checks.py's, run by that python.exe from an empty working directory, as on Windows. On top of
them, Wine's loader lines of each check process are read: an export a DLL of the wheel imports that is missing
fails the check (Windows would refuse the load with error 127; Wine loads it and aborts only when it is called), and
a failed check names the DLLs that were not found.

What differs from Windows, on purpose and said in every result: KMP_AFFINITY=disabled (Intel's OpenMP in torch >=
2.9 aborts at start-up under Wine 8.0: GetNumaNodeProcessorMaskEx is not implemented), and for CPython 3.12/3.13
the two workarounds in ``wine_fixes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from torchbuild.conda import extract
from torchbuild.knowledge import cuda_wheels
from torchbuild.knowledge.compat import version_key
from torchbuild.knowledge.pypi_to_conda import conda_name
from torchbuild.platforms.windows import dependencies as win_deps
from torchbuild.platforms.windows import environments as win_env
from torchbuild.platforms.windows import wine
from torchbuild.platforms.windows.python_embed import Embedded
from torchbuild.results import Check, Status
from torchbuild.stages.smoke import user_test
from torchbuild.stages.smoke.env import (
    CHECKS_TIMEOUT_S,
    Env,
    expect_args,
    harness_end,
    installed_requires,
    leftovers,
    log_run,
    not_started,
    parse_results,
    result_lines,
    retried,
    started_twice,
)
from torchbuild.stages.smoke.resources.smoke_base import NotStarted

if TYPE_CHECKING:
    from torchbuild.config.user_tests import UserTest
    from torchbuild.plan import Plan

KINDS = {"wheel": "a fresh embeddable CPython", "conda": "the conda layout"}
SCRIPT = "torchrun"  # the console script the conda layout runs (its launcher, Scripts\\torchrun.exe)
SCRIPT_TIMEOUT_S = 300.0  # it imports torch: seconds, more under a busy Wine
WINE_ENV = {"KMP_AFFINITY": "disabled", "PYTHONNOUSERSITE": "1"}
# Wine 8.0 workarounds for CPython >= 3.12; each is explained where it is written.
SITECUSTOMIZE = '''\
# Written by torchbuild for the smoke test under Wine 8.0 only.
# CPython 3.12+ implements os.getppid() with KERNEL32.PssCaptureSnapshot, which Wine 8.0 does not implement: the
# call aborts the process. torch's DataLoader workers call os.getppid() (their ManagerWatchdog), so every worker would
# die. This asks NtQueryInformationProcess for the parent's pid instead, which is what the function returns.
import ctypes
import os


class _BasicInformation(ctypes.Structure):
    _fields_ = [("ExitStatus", ctypes.c_void_p), ("PebBaseAddress", ctypes.c_void_p),
                ("AffinityMask", ctypes.c_void_p), ("BasePriority", ctypes.c_void_p),
                ("UniqueProcessId", ctypes.c_void_p), ("InheritedFromUniqueProcessId", ctypes.c_void_p)]


def _getppid():
    info = _BasicInformation()
    ctypes.WinDLL("ntdll").NtQueryInformationProcess(
        ctypes.c_void_p(-1), 0, ctypes.byref(info), ctypes.sizeof(info), None)
    return info.InheritedFromUniqueProcessId or 0


os.getppid = _getppid
'''


def wine_fixes(prefix: Path, python: str) -> list[str]:
    """What the environment changes for Wine 8.0, said in the install check's message."""
    if version_key(python) < (3, 12):
        return []
    # _wmi.pyd (3.12+) calls propsys.VariantToString, a stub in Wine 8.0: platform.uname() and everything that asks
    # for the machine's name abort. Without the module, platform falls back to the registry, as before 3.12.
    (prefix / "_wmi.pyd").unlink(missing_ok=True)
    (prefix / win_env.SITE_PACKAGES / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return ["_wmi.pyd removed", "os.getppid from NtQueryInformationProcess"]


def conda_library_bin(plan: Plan, root: Path, cache_dir: Path, log: Path) -> win_env.LibraryBin:
    """``Library\\bin`` of a win-64 conda prefix at ``root`` with the DLLs the package's run dependencies install
    (vc14_runtime, intel-openmp, ...), from their vendor wheels. What the wheel's declared requirements install
    (mkl of torch 2.3.x) comes with its pip dependencies instead."""
    assert plan.windows is not None
    names = {w.name: conda_name(plan.conda.pypi_names, w.name).conda for w in plan.declared_libraries}
    vendored = cuda_wheels.left_to_vendor_wheels(plan.conda.provided_dlls, plan.declared_libraries, names)
    return win_env.library_bin(
        root, vendored, plan.windows.dll_providers, cuda=plan.cuda, cudnn=plan.cudnn, python=plan.python,
        cache_dir=cache_dir, log=log,
    )  # fmt: skip


@dataclass
class WineBackend:
    plan: Plan
    found: wine.Wine  # the Wine that runs the checks
    embedded: Embedded
    wheel: Path  # the repaired wheel: the conda layout takes the same dependencies
    cache_dir: Path
    workdir: Path  # where the prefix is copied to
    _session: wine.Session | None = field(default=None, init=False)
    _deps: list[win_deps.Resolved] | None = field(default=None, init=False)

    @property
    def where(self) -> str:
        return f"under {self.found.label}, {self.embedded.pinned.label}"

    @property
    def settings(self) -> dict[str, str]:
        """What the Windows processes get that they would not on Windows (said in the stage's result)."""
        return {"KMP_AFFINITY": WINE_ENV["KMP_AFFINITY"]}

    def describe(self, kind: str) -> str:
        return KINDS[kind]

    def session(self) -> wine.Session:
        if self._session is None:
            prefix = wine.fresh_prefix(self.found, self.cache_dir, self.workdir / "wineprefix")
            self._session = wine.Session(self.found, prefix, WINE_ENV)
            self._session.start()
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None

    def dependencies(
        self, log: Path, companions: Mapping[str, Sequence[str]] | None = None
    ) -> list[win_deps.Resolved]:
        """The wheel's requirements for the Windows target and numpy (and what smoke_envs.yaml adds), and those of
        the ``companions`` installed beside it (name -> its Requires-Dist: torchvision's pillow) but torch, once."""
        if self._deps is None:
            plan = self.plan
            markers = {**plan.conda.marker_environment, "python_full_version": self.embedded.pinned.cpython,
                       "implementation_version": self.embedded.pinned.cpython}  # fmt: skip
            roots = [(str(r), "torch") for r in win_deps.applicable(win_deps.metadata_requires(self.wheel), markers)]
            extras = plan.windows.smoke_extras_wine if plan.windows else ()
            roots += [(w.requirement, "smoke_envs.yaml") for w in extras]
            tested = plan.user_test.requires if plan.user_test else ()
            roots += [(line, "matrix.yaml test_requires") for line in tested]
            for name, requires in (companions or {}).items():
                roots += [(str(r), name) for r in win_deps.applicable(requires, markers) if r.name != "torch"]
            dest = self.cache_dir / "win-wheels" / f"py{plan.python}"
            python = self.embedded.pinned.cpython  # the exact release: python_full_version markers hold as they will
            self._deps = win_deps.resolve(roots, python=python, dest=dest, log=log, skip=["torch"])
        return self._deps

    def setup(self, env: Env) -> str:
        env.fresh()
        root = prefix(env)
        win_env.python_env(self.embedded, root)
        scheme = self.plan.conda.install_scheme
        what = [self.embedded.pinned.label]
        if env.kind == "wheel":
            win_deps.install(env.artifact, root, scheme)
            what.append(f"{env.artifact.name} installed into Lib\\site-packages")
        else:
            extract.extract_package(env.artifact, root)
            provided = conda_library_bin(self.plan, root, self.cache_dir, env.log)
            what.append(f"{env.artifact.name} laid out as conda installs it; Library\\bin: {provided.describe()}")
        for name, artifact in env.companions.items():  # its requirement on torch is the torch installed here
            if env.kind == "wheel":
                win_deps.install(artifact, root, scheme)
            else:
                extract.extract_package(artifact, root)
            what.append(f"beside it {name}'s {artifact.name}")
        site_packages = root / win_env.SITE_PACKAGES
        deps = self.dependencies(env.log, {name: installed_requires(site_packages, name) for name in env.companions})
        for dep in deps:
            win_deps.install(dep.wheel, root, scheme)
        what.append(f"{len(deps)} win_amd64 wheels: {', '.join(f'{d.name} {d.version}' for d in deps)}")
        what += wine_fixes(root, self.plan.python)
        return "; ".join(what)

    def run_checks(self, env: Env) -> list[Check]:
        session = self.session()
        script = env.checks_script()
        torch_file = wine.windows_path(prefix(env) / win_env.SITE_PACKAGES / "torch" / "__init__.py")
        expect = expect_args(self.plan, torch_file, list(env.companions))
        argv = [str(prefix(env) / "python.exe"), wine.windows_path(script), *expect]
        try:
            ran, retry = started_twice(lambda: session.run(argv, timeout=CHECKS_TIMEOUT_S, cwd=env.cwd))
        except NotStarted as exc:
            log_run(env, ["wine", *argv], "", f"[could not be started: {exc}]")
            return not_started(env.kind, env.artifact.name, list(env.companions), exc) + leftovers(env)
        stderr = ran.stderr if ran.returncode is not None else f"{ran.stderr}\n[timed out after {CHECKS_TIMEOUT_S} s]"
        log_run(env, ["wine", *argv], ran.stdout, stderr)
        ended = harness_end(ran.returncode, CHECKS_TIMEOUT_S, ran.shown_stderr)
        checks = parse_results(env.kind, ran.stdout, env.artifact.name, list(env.companions), ended)
        checks = retried(loader_verdicts(checks, result_lines(ran.stdout), prefix(env), ran.stderr), retry)
        if env.kind == "conda":
            broken = [rule.why for rule in self.plan.broken_scripts if rule.value == SCRIPT]
            checks.append(script_check(env, session, broken[0] if broken else ""))
        return checks + leftovers(env)

    def run_user_test(self, env: Env, test: UserTest) -> Check:
        session = self.session()
        project = wine.windows_path(Path(test.project))
        return user_test.check(env, test, lambda argv, cwd: wine_command(session, env, argv, cwd), project)


def prefix(env: Env) -> Path:
    return env.root / "env"


PYTHON_NAMES = ("python", "python.exe")


def wine_command(session: wine.Session, env: Env, argv: list[str], cwd: Path) -> user_test.Ran:
    """One command of the user test under Wine: ``python`` is the embeddable's python.exe, another name a console
    script of the environment (``Scripts\\pytest.exe``); nothing else runs there (no shell, no host program)."""
    root = prefix(env)
    name = argv[0]
    script = root / "Scripts" / (name if name.lower().endswith(".exe") else f"{name}.exe")
    if name in PYTHON_NAMES:
        program = root / "python.exe"
    elif "/" not in name and "\\" not in name and script.is_file():
        program = script
    else:
        why = (f"'{name}' cannot run under Wine: there a command is python (the embeddable's python.exe) or a console "
               "script of the environment (Scripts\\*.exe, from test_requires), run without a shell")  # fmt: skip
        return user_test.Ran(None, "", why)
    search = {"WINEPATH": ";".join([wine.windows_path(root), wine.windows_path(root / "Scripts")])}
    ran = session.run([program, *argv[1:]], timeout=user_test.TIMEOUT_S, cwd=cwd, env=search, merge_stderr=True)
    output = wine.without_noise(ran.stdout)
    if ran.returncode is None:
        return user_test.Ran(None, output, f"timed out after {user_test.TIMEOUT_S:.0f} s")
    return user_test.Ran(ran.returncode, output)


def script_check(env: Env, session: wine.Session, recorded_broken: str = "") -> Check:
    """``torchrun --help`` through the package's ``Scripts\\torchrun.exe`` launcher, which must start the layout's
    python.exe (conda's Scripts folder is on PATH in an activated environment); exit 0 and argparse's usage.
    ``recorded_broken``: why the Plan records torchrun as upstream's broken script, where it does."""
    name, file = f"{env.kind}: {SCRIPT} --help", env.artifact.name
    declared = [p for p in (prefix(env) / win_env.SITE_PACKAGES).glob("torch-*.dist-info/entry_points.txt")]
    if not any(re.search(rf"^{SCRIPT}\s*=", p.read_text(encoding="utf-8"), re.MULTILINE) for p in declared):
        return Check(name=name, status="skipped", message=f"this torch declares no {SCRIPT} script", file=file)
    launcher = prefix(env) / "Scripts" / f"{SCRIPT}.exe"
    if not launcher.is_file():
        return Check(name=name, status="failed", message=f"Scripts\\{SCRIPT}.exe is not in the package", file=file)
    argv = [str(launcher), "--help"]
    ran = session.run(argv, timeout=SCRIPT_TIMEOUT_S, cwd=env.cwd)
    log_run(env, ["wine", *argv], ran.stdout, ran.stderr)
    status, message = launcher_verdict(ran.returncode, ran.stdout, ran.stderr, recorded_broken)
    return Check(name=name, status=status, message=message, file=file)


def launcher_verdict(returncode: int | None, stdout: str, stderr: str, recorded_broken: str = "") -> tuple[Status, str]:
    """(status, message) of ``torchrun.exe --help``. Where the Plan records torchrun as upstream's broken script, its
    failure passes when the launcher did its part: Python started and ran torchrun, which raised (a traceback)."""
    said = "timed out" if returncode is None else f"exit {returncode}"
    output = (stdout + stderr).strip()
    if returncode == 0 and f"usage: {SCRIPT}" in stdout:
        fixed = f"; recorded as upstream's broken script but runs ({recorded_broken})" if recorded_broken else ""
        return "passed", f"Scripts\\{SCRIPT}.exe --help: exit 0, {SCRIPT}'s usage{fixed}"
    if recorded_broken and returncode not in (None, 0) and "Traceback (most recent call last)" in output:
        last = output.splitlines()[-1]
        return "passed", (f"Scripts\\{SCRIPT}.exe --help: {said}: the launcher started python.exe, and {SCRIPT} "
                          f"failed as upstream's known fault, as recorded ({recorded_broken}): {last}")  # fmt: skip
    tail = "\n".join(output.splitlines()[-12:])
    return "failed", f"Scripts\\{SCRIPT}.exe --help: {said}\n{tail}"


def loader_verdicts(
    checks: Sequence[Check], results: Mapping[str, Mapping[str, object]], root: Path, shared: str = ""
) -> list[Check]:
    """Each check with what Wine's loader said: a passed check whose process imported a missing export fails (error
    127 on Windows); a failed one names what was not found. Wine writes the loader lines of the check processes
    (started by the checks script, two at a time) to the stderr of the Wine session, ``shared``, where they cannot
    be told apart: a check without lines of its own takes those, and a missing export there fails the import check."""
    out: list[Check] = []
    for check in checks:
        name = check.name.split(": ", 1)[1]
        output = str((results.get(name) or {}).get("output", ""))
        own = [p for p in wine.loader_problems(output) if not p.known]
        common = [p for p in wine.loader_problems(shared) if not p.known]
        if own or check.status == "failed":
            problems = own or list({p.describe(root): p for p in common}.values())
        elif name == "import":
            problems = [p for p in common if p.kind in ("missing export", "unimplemented call")]
        else:
            problems = []
        exports = [p for p in problems if p.kind in ("missing export", "unimplemented call")]
        if check.status == "passed" and exports:
            said = "; ".join(p.describe(root) for p in exports)
            message = f"{check.message}; but Wine's loader reports: {said} (Windows refuses such a load: error 127)"
            out.append(Check(name=check.name, status="failed", message=message, file=check.file))
        elif check.status == "failed" and problems:
            said = "; ".join(p.describe(root) for p in problems)
            first, _, rest = check.message.partition("\n")
            message = f"{first} [Wine's loader: {said}]" + (f"\n{rest}" if rest else "")
            out.append(Check(name=check.name, status="failed", message=message, file=check.file))
        else:
            out.append(check)
    return out
