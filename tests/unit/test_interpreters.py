"""Finding Python X.Y for the build and the smoke: a pythonX.Y on PATH counts only when it runs as X.Y. A pyenv shim
of an inactive version is on PATH and fails; the build stage took it before and its first pip call failed with
"pyenv: python3.12: command not found"."""

from __future__ import annotations

import dataclasses
import os
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
    activation = discover(plan, tmp_path / "cache", {**os.environ, "PATH": path}, provision_cuda=False)
    python = next(r for r in activation.requirements if r.name == f"Python {OTHER}")
    assert not python.found
    assert python.detail == f"no working python{OTHER} on PATH (nor py -{OTHER})"
