"""The users' own test (matrix.yaml ``test_command``, config/user_tests.py) in a smoke environment: after the built-in
checks, each ``&&``-chained command runs in turn, from a fresh empty folder (as cibuildwheel runs it, so that a
source tree is not imported by accident), until one fails. One check, "<env>: test_command" (TB401): passed with its
duration, or failed with the command that failed and the last 40 lines of the output.

The backend runs each command (``Backend.run_command``): on the host with the environment's python first on PATH;
under Wine with the embeddable's python.exe or a console script of the environment.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torchbuild.config.user_tests import UserTest
from torchbuild.results import Check, define
from torchbuild.stages.smoke.env import Env

TEST_COMMAND = define("TB401", "the matrix's test_command passes in the smoke environment")
NAME = "test_command"
TAIL_LINES = 40
TIMEOUT_S = 3600.0  # one command; cibuildwheel sets none, but a hung test must not hold the runner for ever


@dataclass(frozen=True)
class Ran:
    """One command's end: its exit code (None: it could not start or did not finish, ``why`` says which) and its
    output (stdout and stderr together)."""

    returncode: int | None
    output: str
    why: str = ""


Runner = Callable[[list[str], Path], Ran]  # argv, cwd -> how it ended


def check(env: Env, test: UserTest, run: Runner, project: str | None = None) -> Check:
    """The user test run in ``env`` by ``run``; ``project``: the folder ``{project}`` names as the environment sees
    it (a Windows path under Wine)."""
    cwd = env.root / NAME
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    name = f"{env.kind}: {NAME}"
    started = time.perf_counter()
    shown: list[str] = []
    commands = test.commands(project)
    for argv in commands:
        ran = run(argv, cwd)
        line = shlex.join(argv)
        with env.log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ (cd {cwd}; {line})\n{ran.output}\n{ran.why}\n")
        shown += [f"$ {line}", *ran.output.splitlines()]
        if ran.returncode != 0:
            said = ran.why or f"exit {ran.returncode}"
            tail = "\n".join(shown[-TAIL_LINES:])
            message = f"`{line}` failed ({said}); the output (its last {TAIL_LINES} lines):\n{tail}"
            return Check(name=name, status="failed", message=message, code=TEST_COMMAND,
                         duration=time.perf_counter() - started)  # fmt: skip
    took = time.perf_counter() - started
    what = "1 command" if len(commands) == 1 else f"{len(commands)} commands"
    message = f"{test.command}: {what} passed in {took:.1f} s (from an empty folder, {cwd})"
    return Check(name=name, status="passed", message=message, code=TEST_COMMAND, duration=took)
