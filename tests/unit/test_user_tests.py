"""matrix.yaml's test_command and test_requires: read (top level, include entries over it), resolved into the Plan,
and run in a real venv (uv) with a real wheel installed from test_requires."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.conftest import ROOT
from torchbuild.commands.smoke import check_plan
from torchbuild.config.matrix import MatrixError, parse
from torchbuild.config.options import RunOptions
from torchbuild.config.user_tests import UserTest
from torchbuild.errors import UserError
from torchbuild.host import uv
from torchbuild.plan import SMOKE_STAGES, user_test
from torchbuild.run import flow, runner
from torchbuild.stages.smoke import stage as smoke
from torchbuild.stages.smoke.env import Env
from torchbuild.stages.smoke.user_test import check
from torchbuild.stages.smoke.venv import prefix, python_of, run_command

MATRIX = """\
platforms: [linux-64]
python: ["3.11", "3.12"]
test_command: pytest {project}/tests && python -c "import torch"
test_requires: [pytest]
include:
  - {platform: linux-64, cuda: cpu, python: "3.11", test_command: "python {package}/run.py"}
  - {platform: linux-64, cuda: cpu, python: "3.13", test_requires: ["pytest>=8", numpy]}
"""


def test_include_entries_override_the_top_level_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    matrix = parse(MATRIX, str(path))
    tests = {cell.id: user_test(cell, matrix) for cell in matrix.cells()}
    assert tests["linux-64-cpu-py3.11"] == UserTest(
        command="python {package}/run.py", requires=("pytest",), project=str(tmp_path)
    )
    assert tests["linux-64-cpu-py3.12"] == UserTest(
        command='pytest {project}/tests && python -c "import torch"', requires=("pytest",), project=str(tmp_path)
    )
    assert tests["linux-64-cpu-py3.13"] is not None and tests["linux-64-cpu-py3.13"].requires == ("pytest>=8", "numpy")
    assert tests["linux-64-cpu-py3.12"].commands() == [
        ["pytest", f"{tmp_path}/tests"], ["python", "-c", "import torch"]
    ]
    assert tests["linux-64-cpu-py3.11"].commands("Z:\\p") == [["python", "Z:\\p/run.py"]]


def test_a_matrix_without_test_command_has_no_user_test() -> None:
    matrix = parse("platforms: [linux-64]\ntest_requires: [pytest]\n")
    assert user_test(matrix.cells()[0], matrix) is None
    assert torch_plan().user_test is None  # the repository's matrix.yaml sets none


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("test_command: pytest | tee log\n", "matrix.yaml:1: test_command 'pytest | tee log' uses '|', a shell"),
        ("test_command: pytest>log\n", "uses '>', a shell feature"),
        ("test_command: a && && b\n", "has an empty command (before or after '&&')"),
        ("test_command: \"python -c 'x\"\n", "cannot be split into words: No closing quotation"),
        ("test_command: [pytest]\n", "'test_command' must be a single value, not a list"),
        ("test_requires: pytest\n", "'test_requires' must be a list, e.g. test_requires: [pytest]"),
        ("test_requires: ['pytest >']\n", "test_requires 'pytest >' is not a valid requirement"),
        (
            "include:\n  - {platform: linux-64, cuda: cpu, python: '3.11', test_comand: x}\n",
            "matrix.yaml:2: unknown key 'test_comand'. Did you mean 'test_command'?",
        ),
    ],
)
def test_bad_test_keys_are_refused_naming_the_line_and_the_fix(text: str, said: str) -> None:
    with pytest.raises(MatrixError) as caught:
        parse(text)
    assert said in str(caught.value)


@pytest.fixture(scope="module")
def venv_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    """A real venv (uv) with a real wheel installed as test_requires installs it: a module and its console script."""
    root = tmp_path_factory.mktemp("user-test")
    wheels = tmp_path_factory.mktemp("wheels")
    wheel = make_wheel(
        wheels, "usertool-1.0-py3-none-any.whl",
        {"usertool.py": b"import sys\ndef main():\n    print('usertool ran with', sys.argv[1:])\n"},
        entry_points="[console_scripts]\nusertool = usertool:main\n",
    )  # fmt: skip
    env = Env("wheel", root / "wheel", wheel, root / "log.txt")
    env.fresh()
    uv.venv(prefix(env), sys.executable, env.log)
    uv.install(python_of(env), [f"usertool @ {wheel.as_uri()}", "--no-index"], log=env.log)
    return env


def test_a_passing_command_passes_with_its_duration_from_an_empty_folder(venv_env: Env, tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text("import os, sys\nprint(sys.executable)\nprint(os.listdir('.'))\n")
    test = UserTest(command="usertool {project} && python {project}/run.py", requires=(), project=str(tmp_path))
    result = check(venv_env, test, lambda argv, cwd: run_command(venv_env, argv, cwd))
    assert result.status == "passed", result.message
    assert result.name == "wheel: test_command" and result.code == "TB401"
    assert result.message.startswith("usertool {project} && python {project}/run.py: 2 commands passed in ")
    assert result.duration is not None
    log = venv_env.log.read_text()
    assert f"usertool ran with ['{tmp_path}']" in log
    assert f"{python_of(venv_env)}\n[]" in log  # `python` is the environment's, run from an empty folder


def test_a_failing_command_fails_with_its_output_and_stops_the_chain(venv_env: Env, tmp_path: Path) -> None:
    script = "import sys\nfor i in range(60):\n    print('line', i)\nsys.exit(3)\n"
    (tmp_path / "fail.py").write_text(script)
    test = UserTest(command="python {project}/fail.py && usertool never", requires=(), project=str(tmp_path))
    result = check(venv_env, test, lambda argv, cwd: run_command(venv_env, argv, cwd))
    assert result.status == "failed"
    first, *output = result.message.splitlines()
    assert first == f"`python {tmp_path}/fail.py` failed (exit 3); the output (its last 40 lines):"
    assert output == [f"line {i}" for i in range(20, 60)]
    assert "never" not in venv_env.log.read_text().split("fail.py")[-1]


def test_a_program_that_is_nowhere_fails_saying_where_it_was_looked_for(venv_env: Env, tmp_path: Path) -> None:
    test = UserTest(command="no-such-tool-here --x", requires=(), project=str(tmp_path))
    result = check(venv_env, test, lambda argv, cwd: run_command(venv_env, argv, cwd))
    assert result.status == "failed"
    assert f"'no-such-tool-here' is not in the environment ({prefix(venv_env)}/bin) nor on this host's PATH" in (
        result.message
    )


def test_a_skipped_stage_lists_the_user_test_as_skipped_too() -> None:
    plan = torch_plan(platform="win-64")
    plan = dataclasses.replace(plan, user_test=UserTest(command="pytest", requires=(), project="/p"))
    result = smoke._skipped(plan, "wheel", "needs a win-64 host or Wine")
    assert {c.name: c.status for c in result.checks}["wheel: test_command"] == "skipped"
    without = smoke._skipped(torch_plan(platform="win-64"), "wheel", "x")
    assert "wheel: test_command" not in {c.name for c in without.checks}


def test_the_smoke_job_takes_a_plan_recorded_in_another_checkout_but_not_another_command() -> None:
    plan = dataclasses.replace(torch_plan(), user_test=UserTest(command="pytest", requires=(), project="/here"))
    recorded = json.loads(plan.to_json())
    recorded["user_test"]["project"] = "D:\\a\\project"
    check_plan(plan, recorded, Path("state.json"))  # another machine's checkout: the same plan
    recorded["user_test"]["command"] = "pytest -x"
    with pytest.raises(UserError) as caught:
        check_plan(plan, recorded, Path("state.json"))
    assert "state.json was recorded for another plan of linux-64-cpu-py3.11-torch2.13.0 (different: user_test)" in str(
        caught.value
    )


def test_a_test_command_reruns_the_smoke_stages_but_not_the_build() -> None:
    plan = torch_plan()
    tested = dataclasses.replace(plan, user_test=UserTest(command="pytest", requires=(), project="/here"))
    options = RunOptions()
    for stage in flow.pipeline():
        same = runner.input_key(stage, plan, options, {}) == runner.input_key(stage, tested, options, {})
        assert same == (stage.name not in SMOKE_STAGES), stage.name


def test_plan_shows_the_cells_test_command(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("platforms: [linux-64]\ntest_command: pytest {project}/tests\n"
                                     "test_requires: [pytest]\n")  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "plan", "--matrix", "m.yaml", "--torch", "2.13.0"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = f"test command pytest {{project}}/tests (after the smoke checks; needs pytest; {{project}} = {tmp_path})"
    assert said in " ".join(result.stdout.split()), result.stdout
