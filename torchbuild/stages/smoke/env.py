"""What the smoke stages' environment backends share: one environment (``Env``), the ``Backend`` protocol each kind
of host implements (a venv and a conda prefix on the host itself: venv.py; python.org's embeddable CPython for
Windows under Wine on a Linux host: wine.py), and the reading of smoke_checks.py's results.

A backend makes an environment (``setup``), runs the checks in it (``run_checks``) and says where they ran
(``where``: "under Wine 8.0, CPython 3.11.9 embeddable"); the stage does the rest (messages, clean-up). Each smoke
stage makes one environment with a backend of its own.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from torchbuild.errors import UserError
from torchbuild.results import Check, Status
from torchbuild.stages.smoke.resources import smoke_base, smoke_checks
from torchbuild.stages.smoke.resources.smoke_base import NotStarted

if TYPE_CHECKING:
    from torchbuild.config.user_tests import UserTest
    from torchbuild.plan import Plan

# smoke_checks.py's statuses; "not run" (its failure to run a check, never the artifact's) leaves the check unverified
STATUSES: dict[str, Status] = {"passed": "passed", "failed": "failed", "skipped": "skipped", "not run": "unverified"}
HARNESS = "smoke harness"  # the check that fails where the environment's python did not start smoke_checks.py
# Lines of a harness's stderr that say nothing about how it ended (Wine's, for every native DLL it loads)
NOISE = ("find_builtin_dll cannot find builtin", ":fixme:", ":warn:", ":err:module:")
# Every check runs in its own process (import torch: seconds); the DataLoader spawns two more.
CHECKS_TIMEOUT_S = smoke_checks.CHECK_TIMEOUT_S * len(smoke_checks.CHECKS)
T = TypeVar("T")


class BackendError(UserError):
    """An environment could not be made or checked; the smoke stage that uses the backend names itself."""


@dataclass(frozen=True)
class Env:
    """One fresh environment and what it is made from."""

    kind: str  # wheel | conda
    root: Path  # everything of this environment: the interpreter and packages, the empty working directory, ...
    artifact: Path  # the wheel or the .conda installed into it
    log: Path
    # the companions installed beside torch, each by its artifact of the same kind (torchvision's repaired wheel or
    # conda package), whose checks run too (smoke_checks.COMPANION_CHECKS; the others': checks_beside.py)
    companions: Mapping[str, Path] = field(default_factory=dict)

    @property
    def cwd(self) -> Path:
        return self.root / "cwd"

    def fresh(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.cwd.mkdir(parents=True)

    def checks_script(self) -> Path:
        """The resources folder (smoke_checks.py, its siblings, run_checks.py) copied beside the environment, in a
        folder of its own; returns run_checks.py there, the script every check process runs."""
        folder = self.root / "checks"
        folder.mkdir(exist_ok=True)
        for source in sorted(Path(smoke_checks.__file__).parent.glob("*.py")):
            shutil.copyfile(source, folder / source.name)
        return folder / smoke_checks.ENTRY


class Backend(Protocol):
    """Makes the environments of one kind of host and runs the checks in them."""

    @property
    def where(self) -> str:
        """Where the checks run, for every result: "in a fresh venv on this linux-64 host (Python 3.11.7)"."""
        ...

    def describe(self, kind: str) -> str:
        """What an environment of ``kind`` is, for messages: "a fresh venv", "the conda layout"."""
        ...

    def setup(self, env: Env) -> str:
        """Make ``env`` from scratch; return what was done (for the install check's message). Raises UserError."""
        ...

    def run_checks(self, env: Env) -> list[Check]:
        ...

    def run_user_test(self, env: Env, test: UserTest) -> Check:
        """matrix.yaml's test_command in ``env`` (its test_requires were installed by ``setup``): user_test.py."""
        ...

    def close(self) -> None:
        """Release what the backend holds (a running wineserver)."""
        ...


def expect_args(plan: Plan, torch_file: str, companions: Sequence[str] = ()) -> list[str]:
    """smoke_checks.py's arguments: what the Plan expects of torch, and of each of ``companions`` installed beside
    it, its release (their checks run then)."""
    args = ["--expect-version", plan.version, "--expect-cuda", plan.cuda, "--expect-torch-file", torch_file]
    releases = {c.name: c.release for c in plan.companions if c.name in companions and c.release}
    for name in smoke_checks.COMPANION_CHECKS:
        if name in releases:
            args += [f"--expect-{name}", releases[name]]
    for name, release in releases.items():  # those without checks of their own: checks_beside.py's import check
        if name not in smoke_checks.COMPANION_CHECKS:
            args += ["--expect-companion", f"{name}={release}"]
    if plan.is_cuda and plan.cudnn is not None:
        args += ["--expect-cudnn", str(plan.cudnn)]
    declared = plan.declared_libraries
    if cudnn := next((w.version for w in declared if w.name.startswith("nvidia-cudnn-")), None):
        args += ["--expect-cudnn-version", ".".join(cudnn.split(".")[:3])]
    if names := sorted({name for w in declared for name in w.library_names}):
        args += ["--expect-from-environment", ",".join(names)]
    if plan.broken_scripts:
        args += ["--expect-broken-scripts", ",".join(rule.value for rule in plan.broken_scripts)]
    return args


def result_lines(stdout: str) -> dict[str, Mapping[str, Any]]:
    """smoke_checks.py's JSON lines by check name."""
    results: dict[str, Mapping[str, Any]] = {}
    for line in stdout.splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("check") in smoke_checks.CHECKS:
            results[result["check"]] = result
    return results


def harness_started(stdout: str) -> bool:
    """Whether smoke_checks.py said it started (its first line): the environment's python ran it."""
    return any(line.strip() == json.dumps({"harness": smoke_checks.STARTED}) for line in stdout.splitlines())


def harness_end(returncode: int | None, timeout_s: float, stderr: str) -> str:
    """How smoke_checks.py ended, for the checks it left without a result: "timed out after 2400 s", "was killed
    by signal 9", "exited 1", with the last line it wrote on stderr."""
    if returncode is None:
        how = f"timed out after {timeout_s:.0f} s"
    elif returncode < 0:
        how = f"was killed by signal {-returncode}"
    else:
        how = f"exited {returncode}"
    said = [line.strip() for line in stderr.splitlines() if line.strip() and not any(n in line for n in NOISE)]
    return f"{how}: {said[-1]}" if said else how


def parse_results(
    kind: str, stdout: str, artifact: str, companions: Sequence[str] = (), ended: str = "ended"
) -> list[Check]:
    """smoke_checks.py's JSON lines -> named Checks, torch's and those of the ``companions`` installed beside it.

    A check the harness could not run ("not run": its process could not be started twice, the harness failed) and a
    check left without a result (the harness stopped: ``ended`` says how) are "unverified", never the artifact's
    failure. Where the harness did not even start (the environment's python did not run it), the failed check is
    "<kind>: smoke harness", and the others are not run."""
    results = result_lines(stdout)
    started = harness_started(stdout) or bool(results)
    checks = []
    if not started:
        why = f"the environment's python did not start the smoke harness (smoke_checks.py {ended}); no check ran"
        checks.append(Check(name=f"{kind}: {HARNESS}", status="failed", message=why, file=artifact))
    for name in smoke_checks.check_names(companions):
        result = results.get(name)
        if result is None:
            message = (f"not run: the smoke harness (smoke_checks.py) {ended} before this check; the harness's "
                       "failure, not the artifact's" if started else "not run: the smoke harness did not start")
            checks.append(Check(name=f"{kind}: {name}", status="unverified", message=message, file=artifact))
            continue
        message = str(result.get("message", ""))
        status = STATUSES.get(str(result.get("status")))
        if status is None:
            status, message = "failed", f"unknown status {result.get('status')!r}: {message}"
        if status == "failed" and result.get("output"):
            message = f"{message}\n{result['output']}"
        checks.append(Check(name=f"{kind}: {name}", status=status, message=message, file=artifact,
                            duration=_seconds(result.get("seconds"))))  # fmt: skip
    return checks


def started_twice(start: Callable[[], T]) -> tuple[T, str]:
    """The harness's own process started by ``start()``, tried once more where the OS could not start it
    (smoke_base.started_twice: NotStarted after two tries): what it returned, and the retry to say ("" where it
    started at once)."""
    ran, first = smoke_base.started_twice(start)
    return ran, f"the smoke harness could not be started at first ({first}) and started on the retry" if first else ""


def retried(checks: Sequence[Check], note: str) -> list[Check]:
    """``checks`` with ``note`` (``started_twice``'s) in each message."""
    return [dataclasses.replace(c, message=f"{c.message} ({note})") if note else c for c in checks]


def not_started(kind: str, artifact: str, companions: Sequence[str], error: NotStarted) -> list[Check]:
    """Every check "not run": the harness's own process could not be started, twice."""
    message = f"not run: the smoke harness's process could not be started (tried twice: {error}); the host's failure"
    return [Check(name=f"{kind}: {name}", status="unverified", message=message, file=artifact)
            for name in smoke_checks.check_names(companions)]  # fmt: skip


def _seconds(raw: object) -> float | None:
    """A result line's "seconds" (how long the check itself took); None where it has none (it crashed)."""
    try:
        return float(str(raw)) if raw is not None else None
    except ValueError:
        return None


def leftovers(env: Env) -> list[Check]:
    """A failed check when the checks wrote into the working directory (a bug worth seeing)."""
    found = sorted(p.name for p in env.cwd.iterdir())
    if not found:
        return []
    message = f"the checks left files in the working directory: {', '.join(found)}"
    return [Check(name=f"{env.kind}: empty cwd", status="failed", message=message)]


def log_run(env: Env, argv: Sequence[str], stdout: str, stderr: str) -> None:
    with env.log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ (cd {env.cwd}; {' '.join(argv)})\n{stdout}\n{stderr}\n")


def installed_requires(site_packages: Path, name: str) -> list[str]:
    """The Requires-Dist of ``name`` as installed in ``site_packages`` (its dist-info's METADATA, which the wheel and
    the conda package both carry); none where it has no dist-info."""
    import email.parser  # the email package: only where metadata is read

    for metadata in sorted(site_packages.glob(f"{name}-*.dist-info/METADATA")):
        text = metadata.read_text(encoding="utf-8", errors="replace")
        parsed = email.parser.Parser().parsestr(text, headersonly=True)
        return [str(line) for line in parsed.get_all("Requires-Dist") or []]
    return []
