"""matrix.yaml's test_command under Wine: the real embeddable CPython of a win-64 cell, a real wheel with a console
script installed as test_requires installs it, run in a real Wine session as the smoke stage runs it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.config.user_tests import UserTest
from torchbuild.platforms.windows import dependencies as win_deps
from torchbuild.platforms.windows import environments, python_embed, wine
from torchbuild.stages.smoke.env import Env
from torchbuild.stages.smoke.user_test import check
from torchbuild.stages.smoke.wine import WineBackend, prefix, wine_command
from torchbuild.wheel.install import install_wheel

TOOL = b"import os, sys\ndef main():\n    print('usertool ran with', sys.argv[1:], os.listdir('.'))\n    return 0\n"


def test_python_and_a_console_script_run_and_a_host_program_is_refused(tmp_path: Path) -> None:
    found = wine.find()
    if found is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    assert plan.windows is not None and plan.windows.embeddable is not None
    wheel = make_wheel(tmp_path, "usertool-1.0-py3-none-any.whl", {"usertool.py": TOOL},
                       entry_points="[console_scripts]\nusertool = usertool:main\n")  # fmt: skip
    env = Env("wheel", tmp_path / "wheel", wheel, tmp_path / "log.txt")
    env.fresh()
    environments.python_env(python_embed.provision(plan.windows.embeddable, RunOptions().cache_dir), prefix(env))
    install_wheel(wheel, plan.conda.install_scheme, prefix(env), windows=True)
    (tmp_path / "run.py").write_text("import sys\nprint('python is', sys.executable)\nsys.exit(4)\n")
    project = wine.windows_path(tmp_path)
    with wine.Session(found, wine.fresh_prefix(found, RunOptions().cache_dir, tmp_path / "wineprefix")) as session:

        passed = check(env, UserTest(command="usertool {project}", requires=(), project=str(tmp_path)),
                       lambda a, c: wine_command(session, env, a, c), project)  # fmt: skip
        failed = check(env, UserTest(command="python {project}/run.py", requires=(), project=str(tmp_path)),
                       lambda a, c: wine_command(session, env, a, c), project)  # fmt: skip
        refused = check(env, UserTest(command="ls {project}", requires=(), project=str(tmp_path)),
                        lambda a, c: wine_command(session, env, a, c), project)  # fmt: skip
    assert passed.status == "passed", passed.message
    assert f"usertool ran with {[project]!r} []" in env.log.read_text()  # from an empty folder
    assert failed.status == "failed"
    assert failed.message.startswith(f"`python '{project}/run.py'` failed (exit 4)"), failed.message
    assert f"python is {wine.windows_path(prefix(env) / 'python.exe')}" in failed.message
    assert refused.status == "failed"
    said = "'ls' cannot run under Wine: there a command is python (the embeddable's python.exe) or a console script"
    assert said in refused.message


def test_test_requires_pytest_installs_and_runs_under_wine(tmp_path: Path) -> None:
    found = wine.find()
    if found is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    cache = RunOptions().cache_dir
    test = UserTest(command="pytest {project}/tests -q -p no:cacheprovider", requires=("pytest",),
                    project=str(tmp_path / "project"))  # fmt: skip
    plan = dataclasses.replace(torch_plan("win-64", "cpu", "3.11", "2.14.1"), user_test=test)
    assert plan.windows is not None and plan.windows.embeddable is not None
    embedded = python_embed.provision(plan.windows.embeddable, cache)
    torch = make_wheel(tmp_path, "torch-2.14.1+cpu-cp311-cp311-win_amd64.whl", {"torch/__init__.py": b""})
    backend = WineBackend(plan, found, embedded, torch, cache, tmp_path)
    env = Env("wheel", tmp_path / "wheel", torch, tmp_path / "log.txt")
    env.fresh()
    environments.python_env(embedded, prefix(env))
    deps = backend.dependencies(env.log)  # as setup installs them: the wheel's requirements and test_requires
    assert "pytest" in {d.name for d in deps}
    for dep in deps:
        win_deps.install(dep.wheel, prefix(env), plan.conda.install_scheme)
    tests = tmp_path / "project" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_it.py").write_text("def test_passes():\n    pass\n\ndef test_fails():\n    assert 1 == 2\n")
    try:
        result = backend.run_user_test(env, test)
    finally:
        backend.close()
    assert result.status == "failed"
    project = wine.windows_path(tmp_path / "project")  # Windows takes the / that follows {project}
    assert result.message.startswith(f"`pytest '{project}/tests' -q -p no:cacheprovider` failed (exit 1)")
    assert "1 failed, 1 passed" in result.message
