"""Finding a CPython of a given X.Y on this host, for the build and for the smoke's environments: where users keep
them (PATH, pyenv's versions, uv's managed installs, the Windows launcher)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from torchbuild.host import signals, uv
from torchbuild.knowledge.compat import version_key

PROBE = "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.executable)"
PROBE_TIMEOUT_S = 60


def searched(version: str) -> str:
    """Where ``find_python`` looks, for a message that says none was found."""
    return f"on PATH, in pyenv's versions, among uv's managed Pythons or as py -{version}"


def install_hint(version: str) -> str:
    return f"uv python install {version}"


def _probe(argv: list[str]) -> tuple[str, str] | None:
    """(X.Y, executable) that ``argv`` runs, or None when it does not run."""
    try:
        proc = signals.run([*argv, "-c", PROBE], capture_output=True, text=True, errors="replace",
                           timeout=PROBE_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.strip().splitlines()
    return (lines[0], lines[1]) if proc.returncode == 0 and len(lines) == 2 else None


def _pyenv(version: str, env: Mapping[str, str]) -> Iterator[str]:
    """pyenv's installs of X.Y, newest patch first: $PYENV_ROOT (else ~/.pyenv)/versions/X.Y.*/bin/python."""
    root = env.get("PYENV_ROOT") or (str(Path(env["HOME"]) / ".pyenv") if env.get("HOME") else None)
    if root is None:
        return
    installs = [p for p in Path(root, "versions").glob(f"{version}.*") if p.name[len(version) + 1 :].isdigit()]
    for folder in sorted(installs, key=lambda folder: version_key(folder.name), reverse=True):
        for name in ("bin/python", "python.exe"):  # pyenv; pyenv-win
            if (folder / name).is_file():
                yield str(folder / name)


def _candidates(version: str, env: Mapping[str, str]) -> Iterator[tuple[list[str], bool]]:
    """Commands that may run Python X.Y, each with whether it is the interpreter itself (else: ask it which)."""
    path = env.get("PATH")
    on_path = shutil.which(f"python{version}", path=path)
    if on_path is not None:
        yield [on_path], True
    for found in _pyenv(version, env):
        yield [found], True
    managed = uv.managed_python(version, env)
    if managed is not None:
        yield [managed], True
    launcher = shutil.which("py", path=path)
    if launcher is not None:
        yield [launcher, f"-{version}"], False


def find_python(version: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The interpreter for Python X.Y: the one running torchbuild when it matches, else the first that really runs
    as X.Y of ``pythonX.Y`` on PATH (a pyenv shim of a version that is not active is on PATH and fails: "pyenv:
    python3.12: command not found"), pyenv's installs of X.Y, uv's managed X.Y, the Windows launcher's ``py -X.Y``.
    ``environ`` (default: this process's) gives PATH, HOME and PYENV_ROOT, and is uv's environment."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    env = environ if environ is not None else os.environ
    for argv, itself in _candidates(version, env):
        found = _probe(argv)
        if found is not None and found[0] == version:
            return argv[0] if itself else found[1]
    return None
