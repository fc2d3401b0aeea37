"""The smoke's wheel environments unpack a wheel once per content (by_content.py), with real uv and real wheels:
the same bytes from two work directories are unpacked once, beside their content's copy and never into uv's shared
cache (which keeps what it unpacked for good); a wheel of other content (a broken build) gets an unpacking of its
own and fails as it would have; a pruned content takes its unpacking with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel
from torchbuild.host import uv
from torchbuild.results import Artifact
from torchbuild.stages.smoke import by_content

NAME = "demo-1.0-py3-none-any.whl"


def _unpacked(uv_cache: Path) -> int:
    """How many wheels uv has unpacked into its cache (one folder each under archive-v0)."""
    archives = uv_cache / "archive-v0"
    return sum(1 for p in archives.iterdir() if p.is_dir()) if archives.is_dir() else 0


def _install(wheel: Path, where: Path) -> Path:
    """What uv does by itself: unpack into its shared cache."""
    uv.venv(where, sys.executable, where.parent / "uv.log")
    python = where / "bin" / "python"
    uv.install(python, ["--no-deps", str(wheel)], log=where.parent / "uv.log")
    return python


def _smoke_install(wheel: Path, where: Path) -> Path:
    """What the smoke's wheel environment does (venv.py): the build's wheel alone into its content's own cache, then
    the install that brings what it requires (here nothing) with the shared cache."""
    uv.venv(where, sys.executable, where.parent / "uv.log")
    python = where / "bin" / "python"
    own = by_content.unpack_cache(wheel, where / "uv-cache")
    uv.install_own(python, wheel, unpack_cache=own, log=where.parent / "uv.log")
    uv.install(python, [str(wheel)], log=where.parent / "uv.log")
    return python


def _value(python: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", "import demo; print(demo.VALUE)"], capture_output=True, text=True,
                          check=False)  # fmt: skip


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: the venvs' layout here is POSIX's")
def test_the_same_wheel_from_two_runs_is_unpacked_once_and_other_content_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    cache = tmp_path / "cache"
    good = {"demo/__init__.py": b"VALUE = 1\n"}
    first = Artifact.of(make_wheel(tmp_path / "run1" / "repair", NAME, good))
    second = Artifact.of(make_wheel(tmp_path / "run2" / "repair", NAME, good))
    assert first.sha256 == second.sha256 and first.path != second.path

    # what uv does with the two runs' own paths: it unpacks the same bytes twice
    _install(first.path, tmp_path / "control1")
    _install(second.path, tmp_path / "control2")
    assert _unpacked(tmp_path / "uv-cache") == 2

    shared = tmp_path / "uv-cache-2"
    monkeypatch.setenv("UV_CACHE_DIR", str(shared))
    one = by_content.wheel_path(first, cache)
    two = by_content.wheel_path(second, cache)
    assert one == two == cache / "smoke-wheels" / first.sha256 / NAME
    assert _value(_smoke_install(one, tmp_path / "env1")).stdout == "1\n"
    assert _value(_smoke_install(two, tmp_path / "env2")).stdout == "1\n"
    assert _unpacked(one.parent / by_content.UNPACKED) == 1
    assert _unpacked(shared) == 0

    broken_files = {"demo/__init__.py": b"raise ImportError('a broken build')\n"}
    broken = Artifact.of(make_wheel(tmp_path / "run3" / "repair", NAME, broken_files))
    path = by_content.wheel_path(broken, cache)
    assert path == cache / "smoke-wheels" / broken.sha256 / NAME
    ran = _value(_smoke_install(path, tmp_path / "env3"))
    assert ran.returncode == 1 and "ImportError: a broken build" in ran.stderr
    assert _unpacked(path.parent / by_content.UNPACKED) == 1
    assert _unpacked(shared) == 0

    # newer contents push the first out: its copy and its unpacking go together
    for value in range(2, 2 + by_content.KEEP):
        newer = Artifact.of(make_wheel(tmp_path / f"new{value}", NAME, {"demo/__init__.py": b"VALUE = %d\n" % value}))
        _smoke_install(by_content.wheel_path(newer, cache), tmp_path / f"env-new{value}")
    assert not one.parent.exists()
    assert len(list((cache / "smoke-wheels").iterdir())) == by_content.KEEP
    assert _unpacked(shared) == 0


def test_an_artifact_not_staged_is_unpacked_where_its_environment_says(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "repair", NAME, {"demo/__init__.py": b"VALUE = 1\n"})
    assert by_content.unpack_cache(wheel, tmp_path / "env" / "uv-cache") == tmp_path / "env" / "uv-cache"


def test_a_cached_copy_that_changed_is_replaced_and_a_changed_artifact_is_installed_as_it_is(tmp_path: Path) -> None:
    """The path installed always holds the bytes whose sha256 the stage recorded, or is the artifact's own."""
    cache = tmp_path / "cache"
    artifact = Artifact.of(make_wheel(tmp_path / "run1", NAME, {"demo/__init__.py": b"VALUE = 1\n"}))
    path = by_content.wheel_path(artifact, cache)
    path.write_bytes(b"tampered")
    assert by_content.wheel_path(artifact, cache).read_bytes() == artifact.path.read_bytes()

    artifact.path.write_bytes(b"changed after its stage recorded it")
    assert by_content.wheel_path(artifact, tmp_path / "another-cache") == artifact.path
