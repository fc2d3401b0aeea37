"""The users' own builds through the pin step and the Plan: a source build's X.Y.Za0+git<sha7>, a nightly, a release
candidate, a fork's label, a checkout past every release. The version is kept, the facts come from the release it
belongs to (said in one line), and what contradicts the cell is refused naming both sides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from tests.builders import make_wheel
from tests.conftest import ROOT
from torchbuild.config import build_version, matrix
from torchbuild.config.matrix import Cell
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.knowledge.compat import load
from torchbuild.pin import pin

NEWEST = load().releases[-1].version


@pytest.mark.parametrize(
    ("version", "facts", "why"),
    [
        ("2.6.0a0+git1eba9b3", "2.6.0", "2.6.0a0+git1eba9b3 is a source build of 2.6.0: using 2.6.0's facts"),
        ("2.10.0.dev20251105+cpu", "2.10.0", "2.10.0.dev20251105+cpu is a nightly of 2.10.0: using 2.10.0's facts"),
        ("2.6.0rc3", "2.6.0", "2.6.0rc3 is a release candidate of 2.6.0: using 2.6.0's facts"),
        ("2.5.1+myfork", "2.5.1", "2.5.1+myfork is a local build of 2.5.1: using 2.5.1's facts"),
        ("2.5.1+cpu", "2.5.1", "2.5.1+cpu is a release"),
        ("2.16.0a0+gitabcdef1", NEWEST,
         f"2.16.0a0+gitabcdef1 is a source build, newer than the data: using {NEWEST}'s facts (the newest known)"),
        ("2.7.2a0", "2.7.1", "2.7.2a0 is a source build of the 2.7 series: using 2.7.1's facts"),
    ],
)  # fmt: skip
def test_the_facts_of_a_version_come_from_its_release(version: str, facts: str, why: str) -> None:
    found = build_version.facts_of(load(), Version(version))
    assert (found.release.version, found.why) == (facts, why)


def torch_wheel(directory: Path, version: str, tag: str = "cp311-cp311-manylinux_2_28_x86_64", cuda: str = "None",
                said: str | None = None) -> Path:  # fmt: skip
    """A small torch wheel whose torch/version.py says what a build of ``version`` says."""
    text = f"__version__ = '{said or version}'\ndebug = False\ncuda = {cuda}\ngit_version = '1eba9b3c0ffee'\n"
    return make_wheel(directory, f"torch-{version}-{tag}.whl", {"torch/version.py": text.encode()})


def plan_of(wheel: Path, cuda: str = "cpu", torch: str = "latest", platform: str = "linux-64"):  # type: ignore[no-untyped-def]
    m = matrix.load(ROOT / "matrix.yaml")
    cell = Cell(platform=platform, cuda=cuda, python="3.11", torch=torch)
    candidates = pin.check_all([cell], m)
    return pin.pin_all([cell], m, RunOptions(wheel=wheel), candidates)[0]


def test_a_source_builds_wheel_keeps_its_version_and_takes_its_releases_facts(tmp_path: Path) -> None:
    plan = plan_of(torch_wheel(tmp_path, "2.6.0a0+git1eba9b3"))
    assert (plan.torch, plan.version) == ("2.6.0", "2.6.0a0+git1eba9b3")
    assert plan.root.wheel == "torch-2.6.0a0+git1eba9b3-cp311-cp311-manylinux_2_28_x86_64.whl"
    # conda has no local versions: the public version, and the label in the build string (two commits, two files)
    assert plan.root.conda.filename == "pytorch-2.6.0a0-py3.11_cpu_git1eba9b3_0.conda"
    assert plan.env["PYTORCH_BUILD_VERSION"] == "2.6.0a0+git1eba9b3"
    assert any("is a source build of 2.6.0: using 2.6.0's facts" in note for note in plan.notes)
    assert plan.unlabelled_version is None


def test_a_nightly_without_a_label_is_given_the_cells(tmp_path: Path) -> None:
    plan = plan_of(torch_wheel(tmp_path, "2.10.0.dev20251105"))
    assert (plan.torch, plan.version, plan.unlabelled_version) == ("2.10.0", "2.10.0.dev20251105+cpu",
                                                                   "2.10.0.dev20251105")  # fmt: skip
    assert plan.root.conda.filename == "pytorch-2.10.0.dev20251105-py3.11_cpu_0.conda"


def test_a_build_past_every_release_says_whose_facts_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_of(torch_wheel(tmp_path, "2.16.0a0+gitabcdef1"))
    assert (plan.torch, plan.version) == (NEWEST, "2.16.0a0+gitabcdef1")
    said = capsys.readouterr()
    assert f"newer than the data: using {NEWEST}'s facts" in said.out + said.err


def test_a_release_wheel_keeps_the_releases_road(tmp_path: Path) -> None:
    plan = plan_of(torch_wheel(tmp_path, "2.13.0+cpu"))
    assert (plan.torch, plan.version, plan.own_build) == ("2.13.0", "2.13.0+cpu", None)


@pytest.mark.parametrize(
    ("version", "cuda", "torch", "said", "message"),
    [
        ("2.6.0a0+git1eba9b3", "cpu", "2.5.1", None,
         "--wheel torch-2.6.0a0+git1eba9b3-cp311-cp311-manylinux_2_28_x86_64.whl is torch 2.6.0a0+git1eba9b3 "
         "(2.6.0a0+git1eba9b3 is a source build of 2.6.0: using 2.6.0's facts), but --torch 2.5.1 was asked for: "
         "give --torch 2.6.0 (or leave --torch out), or a source of torch 2.5.1."),
        ("2.6.0a0+git1eba9b3", "12.6", "latest", None,
         "--wheel torch-2.6.0a0+git1eba9b3-cp311-cp311-manylinux_2_28_x86_64.whl is a CPU build (its torch/version.py "
         "says cuda = None), but the cell is linux-64-cuda12.6-py3.11: select its cell with --cuda cpu."),
        ("2.6.0a0+git1eba9b3", "cpu", "latest", "2.5.0",
         "--wheel torch-2.6.0a0+git1eba9b3-cp311-cp311-manylinux_2_28_x86_64.whl: its file name says version "
         "2.6.0a0+git1eba9b3, its torch/version.py says '2.5.0': the file was renamed, or is not the wheel it says. "
         "Give the wheel as the build wrote it."),
    ],
)  # fmt: skip
def test_what_contradicts_the_cell_is_refused_naming_both(
    tmp_path: Path, version: str, cuda: str, torch: str, said: str | None, message: str
) -> None:
    with pytest.raises(UserError) as raised:
        plan_of(torch_wheel(tmp_path, version, said=said), cuda=cuda, torch=torch)
    assert str(raised.value) == message


def test_a_cuda_wheel_for_a_cpu_cell_is_refused_by_the_command(tmp_path: Path) -> None:
    wheel = torch_wheel(tmp_path, "2.6.0a0+git1eba9b3", cuda="'12.6'")
    proc = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--cuda", "cpu", "--py", "3.11", "--platform",
                           "linux-64", "--wheel", str(wheel), "--matrix", str(ROOT / "matrix.yaml")],
                          cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "is a CUDA 12.6 build (its torch/version.py says cuda = '12.6')" in proc.stdout + proc.stderr
    assert "select its cell with --cuda 12.6" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "channel").exists()


def _checkout(root: Path, version_txt: str) -> Path:
    """A stand-in PyTorch checkout (named so): the files the source stage looks for, in a real git repository."""
    for marker in ("setup.py", "torch/__init__.py", "aten/src/ATen/.keep", "c10/.keep",
                   "third_party/pybind11/include/.keep", "third_party/fmt/.keep"):  # fmt: skip
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).write_text("", encoding="utf-8")
    (root / "version.txt").write_text(version_txt + "\n", encoding="utf-8")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "stand-in"], check=True)
    return root


def _checkout_plan(path: Path, torch: str = "latest", build_version: str | None = None):  # type: ignore[no-untyped-def]
    m = matrix.load(ROOT / "matrix.yaml")
    cell = Cell(platform="linux-64", cuda="cpu", python="3.11", torch=torch)
    options = RunOptions(source_dir=path, build_version=build_version)
    return pin.pin_all([cell], m, options, pin.check_all([cell], m))[0]


def test_a_checkout_past_every_release_builds_version_txt_plus_its_commit(tmp_path: Path) -> None:
    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    plan = _checkout_plan(path)
    assert plan.version == f"2.16.0a0+git{head[:7]}"
    assert plan.env["PYTORCH_BUILD_VERSION"] == plan.version
    assert plan.torch == NEWEST
    assert any(f"version.txt 2.16.0a0, HEAD {head[:7]}" in note for note in plan.notes)


def test_build_version_replaces_the_checkouts(tmp_path: Path) -> None:
    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    plan = _checkout_plan(path, build_version="2.16.0.dev20261128")
    assert (plan.version, plan.env["PYTORCH_BUILD_VERSION"]) == ("2.16.0.dev20261128+cpu", "2.16.0.dev20261128+cpu")


def test_a_checkout_contradicting_torch_is_refused_with_both_named(tmp_path: Path) -> None:
    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    with pytest.raises(UserError, match=r"is torch 2\.16\.0a0\+git\w{7} .* but --torch 2\.5\.1 was asked for"):
        _checkout_plan(path, torch="2.5.1")


def test_a_releases_checkout_keeps_the_releases_road(tmp_path: Path) -> None:
    path = _checkout(tmp_path / "pytorch", "2.5.1")
    plan = _checkout_plan(path, torch="2.5.1")
    assert (plan.version, plan.own_build) == ("2.5.1+cpu", None)


def test_a_checkout_past_every_release_is_compiled_as_its_dev_version(tmp_path: Path) -> None:
    """Up to the compiler: a stand-in checkout (named so) whose setup.py prints the version it is told and stops."""
    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    (path / "setup.py").write_text(
        "import os, sys\nprint('PYTORCH_BUILD_VERSION=' + os.environ.get('PYTORCH_BUILD_VERSION', '<unset>'))\n"
        "sys.exit(3)\n",
        encoding="utf-8",
    )
    subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "print"],
                   check=True)  # fmt: skip
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "--cuda", "cpu", "--py", "3.11", "--platform",
                           "linux-64", "--source-dir", str(path), "--matrix", str(ROOT / "matrix.yaml"),
                           "--cache-dir", str(tmp_path / "cache")],
                          cwd=workspace, capture_output=True, text=True, check=False)  # fmt: skip
    said = proc.stdout + proc.stderr
    assert f"HEAD {head[:7]}): 2.16.0a0+git{head[:7]} is a source build, newer than the data" in said
    assert "✓ source" in said and "PyTorch 2.16.0a0" in said
    assert "✗ build" in said and proc.returncode == 1
    # what the stand-in setup.py printed is in the build's full log (the message shows only its last lines)
    build_log = (workspace / "build" / "linux-64-cpu-py3.11" / "build.log").read_text(encoding="utf-8")
    assert f"PYTORCH_BUILD_VERSION=2.16.0a0+git{head[:7]}" in build_log


def test_build_version_nightly_is_the_checkouts_version_and_the_nights_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1795824000")  # 2026-11-28 00:00 UTC
    plan = _checkout_plan(path, build_version="nightly")
    assert plan.version == "2.16.0.dev20261128+cpu"
    assert plan.root.conda.filename == "pytorch-2.16.0.dev20261128-py3.11_cpu_0.conda"
    assert any("--build-version nightly: version.txt 2.16.0, night 20261128" in note for note in plan.notes)


def test_build_version_nightly_of_a_wheel_is_refused(tmp_path: Path) -> None:
    m = matrix.load(ROOT / "matrix.yaml")
    cell = Cell(platform="linux-64", cuda="cpu", python="3.11")
    options = RunOptions(wheel=torch_wheel(tmp_path, "2.6.0a0+git1eba9b3"), build_version="nightly")
    with pytest.raises(UserError, match="--build-version nightly names the nightly of a compile"):
        pin.pin_all([cell], m, options, pin.check_all([cell], m))


def test_a_matrix_can_name_a_branch_to_compile_nightly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """matrix.yaml's torch: {git_ref, git_url, build_version: nightly}: the nightly of a branch (here a local
    repository, cloned as --git-ref clones), with no source on the command line."""
    from torchbuild.commands.cli import with_matrix_source

    path = _checkout(tmp_path / "pytorch", "2.16.0a0")
    text = f"torch: {{git_ref: master, git_url: '{path}', build_version: nightly}}\nplatforms: [linux-64]\n"
    m = matrix.parse(text)
    options = with_matrix_source(RunOptions(cache_dir=tmp_path / "cache"), m)
    assert (options.git_ref, options.git_url, options.build_version) == ("master", str(path), "nightly")
    assert with_matrix_source(RunOptions(wheel=tmp_path / "x.whl"), m).git_ref is None  # the command line wins
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1795824000")
    cell = Cell(platform="linux-64", cuda="cpu", python="3.11")
    plan = pin.pin_all([cell], m, options, pin.check_all([cell], m))[0]
    assert plan.version == "2.16.0.dev20261128+cpu"
    assert any(note.startswith("--git-ref master (--build-version nightly") for note in plan.notes)


def test_pypis_win_wheel_named_without_its_label_is_the_release_its_version_py_says(tmp_path: Path) -> None:
    """PyPI's torch-2.13.0-cp311-cp311-win_amd64.whl says '2.13.0+cpu' in torch/version.py (found running the
    win-64 cell under Wine with --wheel of it): the same release, not a renamed file."""
    wheel = torch_wheel(tmp_path, "2.13.0", tag="cp311-cp311-win_amd64", said="2.13.0+cpu")
    plan = plan_of(wheel, platform="win-64")
    assert (plan.torch, plan.version, plan.own_build) == ("2.13.0", "2.13.0+cpu", None)


def test_a_label_that_is_no_accelerators_still_contradicts_an_unlabelled_name(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"its torch/version.py says '2.13.0\+myfork': the file was renamed"):
        plan_of(torch_wheel(tmp_path, "2.13.0", said="2.13.0+myfork"))
