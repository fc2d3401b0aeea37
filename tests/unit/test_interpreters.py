"""Finding Python X.Y for the build and the smoke: a pythonX.Y on PATH counts only when it runs as X.Y. A pyenv shim
of an inactive version is on PATH and fails; the build stage took it before and its first pip call failed with
"pyenv: python3.12: command not found"."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_build import cell_plan
from torchbuild.host.interpreters import find_python
from torchbuild.stages.build.activate import discover

OTHER = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: the stand-in shims are POSIX shell scripts")
def test_a_pyenv_shim_of_an_inactive_version_is_not_a_python(tmp_path: Path) -> None:
    # what pyenv's shim prints and exits with when the version is installed but not selected
    _script(tmp_path / "shims", f"python{OTHER}", f"echo 'pyenv: python{OTHER}: command not found' >&2; exit 127")
    env = {"PATH": str(tmp_path / "shims")}
    assert find_python(OTHER, env) is None
    # an interpreter of another version under the name is not one either (this Python, named python3.12)
    _script(tmp_path / "liar", f"python{OTHER}", f'exec "{sys.executable}" "$@"')
    assert find_python(OTHER, {"PATH": str(tmp_path / "liar")}) is None


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: the stand-in shims are POSIX shell scripts")
def test_a_shim_that_runs_the_version_is_taken(tmp_path: Path) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    # this Python, behind a shim of its own name: found as the running one, and through PATH the same way
    shim = _script(tmp_path / "bin", f"python{version}", f'exec "{sys.executable}" "$@"')
    assert find_python(version, {"PATH": str(tmp_path / "bin")}) == sys.executable
    done = subprocess.run([str(shim), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == str(tuple(sys.version_info[:2]))


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: the stand-in shims are POSIX shell scripts")
def test_the_build_names_a_broken_interpreter_as_missing(tmp_path: Path) -> None:
    _script(tmp_path / "shims", f"python{OTHER}", f"echo 'pyenv: python{OTHER}: command not found' >&2; exit 127")
    plan = dataclasses.replace(cell_plan("cpu"), python=OTHER)
    path = f"{tmp_path / 'shims'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    env = {**_nowhere_else(tmp_path), "PATH": path}
    activation = discover(plan, tmp_path / "cache", env, provision_cuda=False)
    python = next(r for r in activation.requirements if r.name == f"Python {OTHER}")
    assert not python.found
    assert python.detail == (
        f"no working Python {OTHER} on PATH, in pyenv's versions, among uv's managed Pythons or as py -{OTHER}"
    )
    assert python.fix == f"install Python {OTHER} (64-bit): `uv python install {OTHER}`"


def _nowhere_else(tmp_path: Path) -> dict[str, str]:
    """This environment with no pyenv and no uv-managed Pythons (an empty home and install folder)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYENV_ROOT", "UV_PYTHON_INSTALL_DIR")}
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**env, "HOME": str(tmp_path / "home"), "UV_PYTHON_INSTALL_DIR": str(tmp_path / "home" / "uv")}


def _real_other() -> str:
    """A real CPython OTHER of this host (pyenv's or uv's, as users keep them), or skip."""
    # looked for here, not with find_python (whose pyenv and uv searches these tests prove)
    pyenvs = sorted(Path.home().glob(f".pyenv/versions/{OTHER}.*/bin/python{OTHER}"))
    candidates = [*pyenvs, shutil.which(f"python{OTHER}")]
    for candidate in filter(None, candidates):
        done = subprocess.run([str(candidate), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode == 0 and done.stdout.strip() == OTHER:
            return str(Path(candidate).resolve())
    pytest.skip(f"skipped: no Python {OTHER} on this host (pyenv's, or on PATH) to link the installs made here to")


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: pyenv-win's layout is not made here")
def test_pyenvs_installs_are_found_off_path_newest_working_patch_first(tmp_path: Path) -> None:
    real = _real_other()
    root = tmp_path / "pyenv"
    _script(root / "versions" / f"{OTHER}.99" / "bin", "python", "exit 127")  # newest, broken: not taken
    (root / "versions" / f"{OTHER}.1" / "bin").mkdir(parents=True)
    (root / "versions" / f"{OTHER}.1" / "bin" / "python").symlink_to(real)
    _script(root / "versions" / f"{OTHER}-dev" / "bin", "python", "exit 127")  # not an X.Y.Z install
    env = {**_nowhere_else(tmp_path), "PATH": str(tmp_path / "home"), "PYENV_ROOT": str(root)}  # no python on PATH
    assert find_python(OTHER, env) == str(root / "versions" / f"{OTHER}.1" / "bin" / "python")
    # without PYENV_ROOT: ~/.pyenv
    home = Path(env["HOME"])
    (home / ".pyenv").symlink_to(root)
    del env["PYENV_ROOT"]
    assert find_python(OTHER, env) == str(home / ".pyenv" / "versions" / f"{OTHER}.1" / "bin" / "python")


@pytest.mark.skipif(sys.platform != "linux", reason="skipped: the managed-install folder made here is linux-x86_64's")
def test_uvs_managed_installs_are_found(tmp_path: Path) -> None:
    # uv's own layout (`uv python install` makes cpython-X.Y.Z-<platform>/bin/pythonX.Y), asked through real uv; the
    # interpreter in it is this host's real Python OTHER (`uv python install` downloads, which this test must not)
    real = _real_other()
    env = _nowhere_else(tmp_path)
    bin_dir = Path(env["UV_PYTHON_INSTALL_DIR"]) / f"cpython-{OTHER}.1-linux-x86_64-gnu" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / f"python{OTHER}").symlink_to(real)
    env["PATH"] = env["HOME"]  # no python on PATH
    assert find_python(OTHER, env) == str(bin_dir / f"python{OTHER}")
    del env["UV_PYTHON_INSTALL_DIR"]  # none in the empty home's default folder
    assert find_python(OTHER, env) is None


@pytest.mark.skipif(sys.platform != "linux", reason="skipped: a linux-64 cell's smoke on its own host")
def test_a_smoke_without_the_cells_python_is_unverified_and_says_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.builders import torch_plan
    from torchbuild.config.options import RunOptions
    from torchbuild.results import StageResult
    from torchbuild.stages import Context
    from torchbuild.stages.smoke.stage import backend_for

    for name, value in {**_nowhere_else(tmp_path), "PATH": str(tmp_path / "home")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PYENV_ROOT", raising=False)
    plan = dataclasses.replace(torch_plan(), python=OTHER)
    ctx = Context(plan=plan, root=tmp_path, options=RunOptions(cache_dir=tmp_path / "cache"), inputs={})
    result = backend_for(ctx, "wheel")
    assert isinstance(result, StageResult)  # no backend: the stage's result
    assert result.status == "unverified"
    assert result.message == (
        f"not run: needs Python {OTHER} on this host (none on PATH, in pyenv's versions, among uv's managed Pythons "
        f"or as py -{OTHER}): `uv python install {OTHER}`, then rerun"
    )
    assert {c.status for c in result.checks} == {"unverified"}
