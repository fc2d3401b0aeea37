"""The CLI as a user runs it: exit codes, messages on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.support_faults import Mount, tmpfs
from torchbuild.config import matrix


def pipeline(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args], cwd=cwd, capture_output=True, text=True, check=False
    )

__all__ = ["tmpfs"]  # the fixture, imported for pytest


def test_help() -> None:
    result = pipeline("--help")
    assert result.returncode == 0
    assert "plan" in result.stdout and "matrix" in result.stdout


def test_plan_says_what_latest_resolves_to() -> None:
    result = pipeline("plan", "--cuda", "9.0", "--py", "3.6", "--platform", "win-64")
    assert result.returncode == 0, result.stderr
    assert "torch 'latest' resolves to 1.1.0" in result.stderr
    assert "MSVC 14.11 (Visual Studio 2017; vcvarsall.bat x64 -vcvars_ver=14.11)" in result.stdout
    assert "CUDA_PATH                     %CUDA_PATH_V9_0%" in result.stdout or "%CUDA_PATH_V9_0%" in result.stdout


def test_plan_says_it_asked_no_index_unless_told_to() -> None:
    result = pipeline("plan", "--cuda", "cpu", "--py", "3.11", "--platform", "win-64")
    assert result.returncode == 0, result.stderr
    assert "no package index asked" in result.stderr and "'plan --ask-indexes' asks them" in result.stderr


@pytest.mark.slow
def test_plan_ask_indexes_pins_latest_as_a_run_does() -> None:
    """Real index queries (pip's configured indexes): the release named is the one the plan holds."""
    result = pipeline("plan", "--json", "--ask-indexes", "--cuda", "cpu", "--py", "3.11", "--platform", "win-64")
    assert result.returncode == 0, result.stderr
    (plan,) = json.loads(result.stdout)
    said = pipeline("plan", "--ask-indexes", "--cuda", "cpu", "--py", "3.11", "--platform", "win-64").stderr
    assert f"torch 'latest' resolves to {plan['torch']}" in said and "that the package indexes offer" in said
    assert "no package index asked" not in said


def test_plan_json_for_one_cell_and_for_the_matrix() -> None:
    (one,) = json.loads(pipeline("plan", "--json", "--cuda", "cpu", "--py", "3.11", "--platform", "linux-64").stdout)
    assert one["cell_id"] == "linux-64-cpu-py3.11"
    (torch,) = one["packages"]
    assert (torch["name"], torch["conda"]["build_string"]) == ("torch", "py3.11_cpu_0")
    every = json.loads(pipeline("plan", "--json").stdout)
    assert [p["cell_id"] for p in every] == [c.id for c in matrix.load(ROOT / "matrix.yaml").cells()]


def test_github_matrix_is_one_entry_per_cell() -> None:
    result = pipeline("matrix", "--github")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    cells = matrix.load(ROOT / "matrix.yaml").cells()
    assert [e["cell"] for e in payload["include"]] == [c.id for c in cells]
    first = payload["include"][0]
    assert set(first) == {"cell", "platform", "cuda", "python", "torch", "runs-on", "conda-builder"}
    assert {e["conda-builder"] for e in payload["include"]} == {"rattler-build"}  # matrix.yaml's build.conda_builder
    runs_on = {e["platform"]: e["runs-on"] for e in payload["include"]}
    assert runs_on == {"win-64": "windows-2022", "linux-64": "ubuntu-latest"}
    # --only selects the same cell everywhere a cell can be selected.
    only = json.loads(pipeline("matrix", "--github", "--only", first["cell"]).stdout)
    assert only["include"] == [first]
    (plan,) = json.loads(pipeline("plan", "--json", "--only", first["cell"]).stdout)
    assert plan["cell_id"] == first["cell"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cuda", "9.3", "--py", "3.6"], "Unknown CUDA version '9.3'. Valid: cpu, 8.0"),
        (["--cuda", "cpu", "--py", "2.7"], "Python 2 is not supported"),
        (["--platform", "win-32", "--cuda", "cpu", "--py", "3.6"], "PyTorch does not support 32-bit Windows"),
        (["--platform", "win-64", "--cuda", "9.0", "--py", "3.6", "--torch", "2.5.1"], "Releases that do: 0.4.0"),
        (["--platform", "win-64", "--cuda", "12.1", "--py", "3.11", "--msvc", "14.40"], "refuses MSVC 14.40"),
        (["--only", "no-such-cell"], "No cell 'no-such-cell' in"),
    ],
)
@pytest.mark.parametrize("command", ["plan", "run"])
def test_bad_input_exits_2_without_traceback(command: str, args: list[str], message: str, tmp_path: Path) -> None:
    result = pipeline(command, *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written: no build/, no channel/


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("torch: latest\npyhton: ['3.11']\n", "bad.yaml:2: unknown key 'pyhton'. Did you mean 'python'?"),
        ("cuda: cpu\n", "bad.yaml:1: 'cuda' must be a list"),
        ("cuda: [cpu\n", "bad.yaml:2: invalid YAML"),
    ],
)
def test_bad_matrix_file(text: str, message: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = pipeline("plan", "--matrix", str(bad))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("system", "machine", "subdir"),
    [("linux", "x86_64", "linux-64"), ("win32", "AMD64", "win-64"), ("win32", "x86", "win-32"),
     ("darwin", "arm64", "osx-arm64"), ("linux", "aarch64", "linux-aarch64")],
)  # fmt: skip
def test_the_host_platform_by_conda_subdir(
    monkeypatch: pytest.MonkeyPatch, system: str, machine: str, subdir: str
) -> None:
    import platform

    from torchbuild.commands import selection
    from torchbuild.errors import UserError
    from torchbuild.host.platform import host_platform

    monkeypatch.setattr(sys, "platform", system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert host_platform() == subdir
    if subdir in ("win-64", "linux-64"):
        assert selection.default_platform() == subdir
    else:
        with pytest.raises(UserError, match="32-bit Windows" if subdir == "win-32" else "pass --platform win-64"):
            selection.default_platform()


def test_run_resolves_each_plan_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The release is chosen first (here: from --wheel's name, no index asked), then the Plan is resolved once."""
    from torchbuild import plan as plan_mod
    from torchbuild.commands import cli, selection
    from torchbuild.pin import pin
    from torchbuild.run import runner

    resolved: list[str] = []
    real = plan_mod.resolve

    def counting(cell: matrix.Cell, *args: object, **kwargs: object) -> plan_mod.Plan:
        resolved.append(cell.id)
        return real(cell, *args, **kwargs)

    for module in (plan_mod, pin, selection):
        if hasattr(module, "resolve"):
            monkeypatch.setattr(module, "resolve", counting)
    ran: list[list[str]] = []
    monkeypatch.setattr(runner, "run", lambda plans, **_: ran.append([p.torch for p in plans]) or 0)
    wheel = tmp_path / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["--cuda", "cpu", "--py", "3.11", "--platform", "linux-64", "--wheel", str(wheel),
                     "--matrix", str(ROOT / "matrix.yaml")])  # fmt: skip
    assert code == 0
    assert resolved == ["linux-64-cpu-py3.11"]
    assert ran == [["2.12.0"]]


def test_a_relative_repodata_directory_is_taken_as_that_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # py-rattler takes a relative 'rd' for an anaconda.org channel name (verify then failed with a network error
    # about conda.anaconda.org/rd/...): the option is made absolute where it is read.
    from torchbuild.commands import cli

    (tmp_path / "rd" / "conda-forge" / "linux-64").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    options = cli.run_options(cli.build_parser().parse_args(["run", "--repodata", "rd"]))
    assert options.repodata == tmp_path / "rd" and options.repodata.is_absolute()


@pytest.mark.parametrize(
    ("layout", "args", "message"),
    [
        ("cache-file", ["--cache-dir", "cache"], "--cache-dir {here}/cache is a file, not a directory"),
        ("cache-file", ["--cache-dir", "cache/deeper"], "--cache-dir {here}/cache/deeper cannot be made: {here}/cache "
         "is a file"),
        ("build-file", [], "the work folder {here}/build is a file, not a directory"),
    ],
)  # fmt: skip
def test_a_directory_option_that_is_a_file_is_refused_before_anything_runs(
    layout: str, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from torchbuild.commands import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / layout.split("-")[0]).write_text("a file\n")
    before = sorted(tmp_path.rglob("*"))
    argv = ["run", "--platform", "linux-64", "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml")]
    if "--cache-dir" in args:
        args = [args[0], str(tmp_path / args[1])]
    assert cli.main([*argv, *args]) == 2
    assert message.format(here=tmp_path) in " ".join(capsys.readouterr().err.split())
    assert sorted(tmp_path.rglob("*")) == before


def test_a_cache_dir_on_a_read_only_disk_is_refused_before_anything_runs(
    tmpfs: Mount, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchbuild.commands import cli

    monkeypatch.chdir(tmp_path)
    tmpfs.read_only()
    try:
        argv = ["run", "--platform", "linux-64", "--cuda", "cpu", "--py", "3.11", "--matrix", str(ROOT / "matrix.yaml"),
                "--cache-dir", str(tmpfs.path / "cache")]  # fmt: skip
        assert cli.main(argv) == 2
    finally:
        tmpfs.read_only(False)
    message = f"--cache-dir {tmpfs.path / 'cache'} is on a read-only file system (its parent {tmpfs.path} is not"
    assert message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "build").exists()
