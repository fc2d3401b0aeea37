"""Options modelled once: the typed dataclasses of config/options.py are where each option's choices and default are
written; matrix.yaml's validation and the CLI read them there. The cache folder is asked when needed, not at import.
A tool that fails names no stage of its own: the stage that ran it does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.commands import selection
from torchbuild.commands.cli import build_parser, run_options
from torchbuild.config import environment, matrix
from torchbuild.config.matrix_nodes import MatrixError
from torchbuild.config.option_fields import choices, default
from torchbuild.config.options import BuildOptions, RunOptions
from torchbuild.errors import StageFailed, UserError, as_stage_failure, one_of
from torchbuild.host.proc import ToolError, ToolFailed, ToolMissing, run_tool
from torchbuild.stages.repair.auditwheel_run import auditwheel_repair

BUILD_CHOICES = ("compiler_cache", "generator", "conda_builder")


def help_of(command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """``COMMAND --help`` as the user reads it, on a terminal wide enough that no path is wrapped."""
    monkeypatch.setenv("COLUMNS", "300")
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("key", BUILD_CHOICES)
def test_a_build_key_takes_the_choices_its_type_names(key: str) -> None:
    for choice in choices(BuildOptions, key):
        assert getattr(matrix.parse(f"build:\n  {key}: {choice}\n").build, key) == choice
    with pytest.raises(MatrixError) as refused:
        matrix.parse(f"build:\n  {key}: bogus\n")
    valid = one_of(choices(BuildOptions, key))
    assert str(refused.value) == f"matrix.yaml:2: build.{key} 'bogus' is not one of {valid}."
    assert getattr(matrix.parse("channel: c\n").build, key) == default(BuildOptions, key)


def test_the_build_choices_are_those_the_matrix_reference_has_always_listed() -> None:
    assert {key: choices(BuildOptions, key) for key in BUILD_CHOICES} == {
        "compiler_cache": ("sccache", "clcache", "none"),
        "generator": ("ninja", "visual-studio"),
        "conda_builder": ("rattler-build", "conda-build"),
    }


def test_the_run_command_defaults_are_run_options_defaults(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(environment.REPODATA, raising=False)
    options = run_options(build_parser().parse_args(["run"]))
    assert options == RunOptions(repodata=environment.repodata())
    helped = help_of("run", capsys, monkeypatch)
    assert "(default: conda)" in helped and "(default: 5)" in helped and "(default: 2)" in helped
    assert f"(default: {RunOptions().git_url})" in helped


def test_the_format_flag_takes_the_choices_of_its_type(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--format", "zip"])
    assert exited.value.code == 2
    assert "invalid choice: 'zip' (choose from 'conda', 'tar.bz2')" in capsys.readouterr().err


def test_the_platform_flag_names_the_known_platforms(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    helped = " ".join(help_of("plan", capsys, monkeypatch).split())
    assert "--platform win-64|linux-64 win-64 or linux-64 (default: this host's)" in helped
    # a platform added to knowledge/compat.py's list is named without a second edit (the list patched here)
    monkeypatch.setattr(selection, "PLATFORMS", ("win-64", "linux-64", "osx-arm64"))
    helped = " ".join(help_of("plan", capsys, monkeypatch).split())
    assert "--platform win-64|linux-64|osx-arm64 win-64, linux-64 or osx-arm64 (default: this host's)" in helped


def test_a_host_of_no_known_platform_is_told_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection, "host_platform", lambda: "osx-arm64")  # a fake host: this one is linux or win
    with pytest.raises(UserError) as refused:
        selection.default_platform()
    assert str(refused.value) == "No default platform for this host (osx-arm64): pass --platform win-64 or linux-64."
    monkeypatch.setattr(selection, "PLATFORMS", ("win-64", "linux-64", "linux-aarch64"))
    with pytest.raises(UserError) as refused:
        selection.default_platform()
    assert str(refused.value).endswith("pass --platform win-64, linux-64 or linux-aarch64.")


@pytest.mark.skipif(sys.platform != "linux", reason="skipped: XDG_CACHE_HOME is Linux's")
def test_the_cache_follows_xdg_cache_home_set_after_import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "later"))
    cache = tmp_path / "later" / "torchbuild"
    assert RunOptions().cache_dir == cache
    assert run_options(build_parser().parse_args(["run"])).cache_dir == cache
    for command in ("run", "doctor"):
        assert f"download cache (default: {cache}, the user's cache folder)" in help_of(command, capsys, monkeypatch)


def test_a_failing_tool_says_what_failed_and_the_stage_that_ran_it_names_itself(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    with pytest.raises(ToolFailed) as failed:
        run_tool(argv, log=tmp_path / "tool.log", what="the fixture tool")
    assert str(failed.value).startswith("the fixture tool failed (exit 3). Last lines:\nboom\n")
    assert (failed.value.returncode, failed.value.stage) == (3, "")
    with pytest.raises(StageFailed) as named, as_stage_failure("repair", ToolError):
        run_tool(argv, log=tmp_path / "tool.log", what="the fixture tool")
    assert str(named.value).startswith("repair: the fixture tool failed (exit 3).")
    with pytest.raises(ToolMissing, match=r"^no-such-tool-here not found on PATH \(needed for this stage\)$"):
        run_tool(["no-such-tool-here"], log=tmp_path / "tool.log")


def test_a_failed_auditwheel_repair_is_the_repair_stage_s_failure(tmp_path: Path) -> None:
    not_a_wheel = tmp_path / "torch-2.5.1-cp311-cp311-linux_x86_64.whl"
    not_a_wheel.write_bytes(b"not a zip")
    target = tmp_path / "out" / "torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    with pytest.raises(StageFailed) as failed:
        auditwheel_repair(not_a_wheel, "manylinux_2_28_x86_64", {}, target, tmp_path / "repair.log", {})
    assert str(failed.value).startswith("repair: auditwheel repair failed (exit ")
    assert str(failed.value).endswith(f"Full log: {tmp_path / 'repair.log'}")
    assert not target.exists()


def _row(page: str, key: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))


@pytest.mark.parametrize(
    ("page", "key", "owner", "name"),
    [
        *[("matrix.md", key, BuildOptions, key) for key in BUILD_CHOICES],
        ("options.md", "--format", RunOptions, "conda_format"),
    ],
)
def test_the_reference_lists_each_choice_and_the_default_of_the_type(
    page: str, key: str, owner: type, name: str
) -> None:
    cells = _row(page, key).split(" | ")
    assert all(f"`{choice}`" in cells[1] for choice in choices(owner, name)), (page, cells[1])
    assert cells[2] == f"`{default(owner, name)}`", (page, cells[2])
