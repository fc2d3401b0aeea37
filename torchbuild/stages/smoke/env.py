"""What the smoke stages' environment backends share: one environment (``Env``), the ``Backend`` protocol each kind
of host implements (a venv and a conda prefix on the host itself: venv.py; python.org's embeddable CPython for
Windows under Wine on a Linux host: wine.py), and the reading of smoke_checks.py's results.

A backend makes an environment (``setup``), runs the checks in it (``run_checks``) and says where they ran
(``where``: "under Wine 8.0, CPython 3.11.9 embeddable"); the stage does the rest (messages, clean-up). Each smoke
stage makes one environment with a backend of its own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from torchbuild.errors import UserError
from torchbuild.results import Check, Status
from torchbuild.stages.smoke.resources import smoke_checks

if TYPE_CHECKING:
    from torchbuild.config.user_tests import UserTest
    from torchbuild.plan import Plan

STATUSES: dict[str, Status] = {"passed": "passed", "failed": "failed", "skipped": "skipped"}
# Every check runs in its own process (import torch: seconds); the DataLoader spawns two more.
CHECKS_TIMEOUT_S = smoke_checks.CHECK_TIMEOUT_S * len(smoke_checks.CHECKS)


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


def parse_results(kind: str, stdout: str, artifact: str, companions: Sequence[str] = ()) -> list[Check]:
    """smoke_checks.py's JSON lines -> named Checks, torch's and those of the ``companions`` installed beside it; a
    check without a result line is a failure."""
    results = result_lines(stdout)
    checks = []
    for name in smoke_checks.check_names(companions):
        result = results.get(name)
        if result is None:
            message = "no result (smoke_checks.py stopped before this check)"
            checks.append(Check(name=f"{kind}: {name}", status="failed", message=message, file=artifact))
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
