"""uv's resolver for a target platform (host/uv.py): platform names, pip's settings as uv flags, and real
resolutions against local wheel folders (what pip.download and the pin step rely on: the chosen file, its sha256,
and "nothing offered" told apart from "could not ask")."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.host import pip, uv
from torchbuild.pin import pin
from torchbuild.stages import source

LINUX = uv.Target(python="3.11", platform=uv.python_platform("manylinux_2_28_x86_64"))
WINDOWS = uv.Target(python="3.11", platform=uv.python_platform("win_amd64"))


@pytest.fixture()
def only(pip_sees_only: Path) -> Path:
    """pip (and so uv) sees only the folder returned (tests/conftest.py), with four torch wheels in it."""
    wheels = pip_sees_only
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "torch-2.13.0-cp311-cp311-win_amd64.whl",
                 "torch-2.14.1-cp311-cp311-win_amd64.whl", "torch-2.14.1+cpu-cp312-cp312-win_amd64.whl"):  # fmt: skip
        make_wheel(wheels, name, {"torch/__init__.py": b""})
    return wheels


@pytest.mark.parametrize(
    ("tag", "platform"),
    [
        ("win_amd64", "x86_64-pc-windows-msvc"),
        ("win32", "i686-pc-windows-msvc"),
        ("manylinux_2_28_x86_64", "x86_64-manylinux_2_28"),
        ("manylinux_2_17_aarch64", "aarch64-manylinux_2_17"),
        ("manylinux1_x86_64", "x86_64-manylinux2014"),
        ("manylinux2010_x86_64", "x86_64-manylinux2014"),
        ("manylinux2014_x86_64", "x86_64-manylinux_2_17"),
        ("manylinux_2_5_x86_64", "x86_64-manylinux2014"),  # the seeds' torch 0.4 era: older than uv's oldest
        ("manylinux_2_12_x86_64", "x86_64-manylinux2014"),
        ("manylinux_2_24_x86_64", "x86_64-manylinux_2_17"),  # uv has no 2_18-2_27: the newest older one
        ("manylinux_2_29_x86_64", "x86_64-manylinux_2_28"),
        ("manylinux_2_35_x86_64", "x86_64-manylinux_2_35"),
        ("manylinux_2_99_x86_64", "x86_64-manylinux_2_40"),
        ("linux_x86_64", "x86_64-unknown-linux-gnu"),
    ],
)
def test_python_platform_of_a_wheel_tag(tag: str, platform: str) -> None:
    assert uv.python_platform(tag) == platform


ERA_TAGS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
            "manylinux_2_12_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64", "manylinux_2_28_x86_64",
            "manylinux_2_34_x86_64", "manylinux_2_17_aarch64", "manylinux_2_28_aarch64"]  # fmt: skip


@pytest.mark.parametrize("tag", ERA_TAGS)
def test_uv_accepts_the_platform_of_every_manylinux_era(tag: str, tmp_path: Path) -> None:
    """The seeds' Linux cell (torch 0.4, manylinux1) ended in uv's usage text: every era's tag must be one uv takes."""
    requirements = tmp_path / "requirements.in"
    requirements.write_text("", encoding="utf-8")
    argv = [uv.binary(), "pip", "compile", "--no-config", "--no-index", "--quiet", str(requirements),
            *uv.Target(python="3.8", platform=uv.python_platform(tag)).args()]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_target_of_pips_options() -> None:
    target = uv.target_of(pip.target_args("3.6", "cp36m", ["win_amd64"]))
    assert target == uv.Target(python="3.6", platform="x86_64-pc-windows-msvc")
    # a cell's 3.6 is the series: a wheel that requires >=3.6.2 is its wheel, as pip (--ignore-requires-python) says
    assert target.args()[:2] == ["--python-version", "3.6.99"]
    assert uv.Target(python="3.6.2", platform="x").args()[:2] == ["--python-version", "3.6.2"]


def test_pips_settings_as_uv_flags(tmp_path: Path) -> None:
    links = [str(tmp_path), str(tmp_path / "gone"), "https://c/links"]
    settings = {"index-url": ["https://a/simple"], "extra-index-url": ["https://b/simple"], "no-index": ["yes"],
                "find-links": links, "cert": ["/ca.pem"]}  # fmt: skip
    args, env = uv.config_args(settings)
    assert args == ["--no-config", "--index-strategy", "unsafe-best-match", "--no-index", "--default-index",
                    "https://a/simple", "--index", "https://b/simple", "--find-links", str(tmp_path), "--find-links",
                    "https://c/links"]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/ca.pem"}


def test_lock_chooses_the_targets_wheel_with_its_sha256(only: Path, tmp_path: Path) -> None:
    log = tmp_path / "uv.log"
    (linux,) = uv.lock(["torch==2.13.0+cpu"], LINUX, log=log, deps=False)
    assert linux.local_path == only / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert linux.sha256 == hashlib.sha256(linux.local_path.read_bytes()).hexdigest()
    (windows,) = uv.lock(["torch===2.14.1"], WINDOWS, log=log, deps=False)
    assert (windows.filename, windows.version) == ("torch-2.14.1-cp311-cp311-win_amd64.whl", "2.14.1")


def test_a_re_upload_with_a_build_number_is_the_wheel_taken(only: Path, tmp_path: Path) -> None:
    """PyPI has torch-2.10.0-cp311-... and its re-upload torch-2.10.0-3-cp311-...: uv lists both, pip takes the
    higher build number, and so does the lock."""
    for build in ("", "-3"):
        name = f"torch-2.10.0{build}-cp311-cp311-manylinux_2_28_x86_64.whl"
        make_wheel(only, name, {"torch/__init__.py": b""})
    (chosen,) = uv.lock(["torch===2.10.0"], LINUX, log=tmp_path / "uv.log", deps=False)
    assert chosen.filename == "torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_of_several_wheels_for_the_target_the_one_an_installer_prefers_is_taken(only: Path, tmp_path: Path) -> None:
    """charset-normalizer 3.5.3 publishes cp39-cp39-win_amd64, cp37-abi3-win_amd64 and py3-none-any: uv lists all
    three for a Windows CPython 3.9 (the corpus's Wine smoke of 2.0.0/3.9 stopped on it), pip takes the cp39 one."""
    for tags in ("cp39-cp39-win_amd64", "cp37-abi3-win_amd64", "py3-none-any"):
        make_wheel(only, f"charset_normalizer-3.5.3-{tags}.whl", {"charset_normalizer/__init__.py": b""})
    target = uv.Target(python="3.9.13", platform=uv.python_platform("win_amd64"))
    (chosen,) = uv.lock(["charset-normalizer==3.5.3"], target, log=tmp_path / "uv.log", deps=False)
    assert chosen.filename == "charset_normalizer-3.5.3-cp39-cp39-win_amd64.whl"
    (on_311,) = uv.lock(["charset-normalizer==3.5.3"], WINDOWS, log=tmp_path / "uv.log", deps=False)
    assert on_311.filename == "charset_normalizer-3.5.3-cp37-abi3-win_amd64.whl"  # no cp311 one: abi3 before any


def test_nothing_offered_is_told_apart_from_not_asking(only: Path, tmp_path: Path) -> None:
    with pytest.raises(uv.UvError) as none:
        uv.lock(["torch==2.14.1+cpu"], WINDOWS, log=tmp_path / "uv.log", deps=False)  # only a cp312 one
    assert none.value.no_match
    assert "we only found wheels for `torch` (v2.14.1+cpu) with the following Python implementation tag: `cp312`" in (
        none.value.detail
    )
    with pytest.raises(uv.UvError) as broken:
        uv.lock(["torch=="], WINDOWS, log=tmp_path / "uv.log", deps=False)
    assert not broken.value.no_match


def test_download_links_a_local_hit_and_reuses_a_file_with_the_right_sha256(only: Path, tmp_path: Path) -> None:
    target = pip.target_args("3.11", "cp311", ["manylinux_2_28_x86_64"])
    (got,) = pip.download(["torch==2.13.0+cpu"], tmp_path / "dest", log=tmp_path / "pip.log", target=target)
    assert got.local_source == only / got.path.name and got.path.read_bytes() == got.local_source.read_bytes()
    assert not got.downloaded


def test_the_expected_failure_of_the_first_probe_is_shown_only_with_verbose(
    only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """win-64 CPU: PyPI publishes the build unlabelled, so torch==2.14.1+cpu is asked for first and not offered."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    for verbose in (False, True):
        fetched, unlabelled = source._fetch_any(plan, tmp_path / "cache", tmp_path / "source.log", verbose)
        assert unlabelled and fetched.local_source == only / "torch-2.14.1-cp311-cp311-win_amd64.whl"
        shown = capsys.readouterr().err  # the console writes to stderr
        if not verbose:
            assert shown == ""
        else:
            assert "torch==2.14.1+cpu" in shown and "No solution found" in shown
            assert "PyPI publishes this build unlabelled, trying torch==2.14.1" in shown
        assert "we can conclude that your requirements are unsatisfiable" in (tmp_path / "source.log").read_text()
    pin._offered.cache_clear()
    assert pin.newest_available(plan, ["2.15.0", "2.14.1"], verbose=False) == "2.14.1"
    assert capsys.readouterr().err == ""
    pin._offered.cache_clear()
    assert pin.newest_available(plan, ["2.15.0", "2.14.1"], verbose=True) == "2.14.1"
    said = capsys.readouterr().err
    assert "pin: torch==2.14.1+cpu (x86_64-pc-windows-msvc, Python 3.11): No solution found" in said


def test_lock_needs_no_python_on_path(only: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found under Wine: on a Windows host whose only Python is python.org's embeddable (on no PATH, in no
    registry), `uv pip compile` said 'No interpreter found for Python 3.11.99'. Here: no Python on PATH, none
    managed by uv; the lock still resolves, for the target."""
    empty = tmp_path / "empty"
    empty.mkdir()
    uv.binary()  # found before PATH is emptied
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("UV_PYTHON_INSTALL_DIR", str(empty))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS", "never")
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    (windows,) = uv.lock(["torch===2.14.1"], WINDOWS, log=tmp_path / "uv.log", deps=False)
    assert windows.filename == "torch-2.14.1-cp311-cp311-win_amd64.whl"
