"""Finding a CPython of a given X.Y on this host, for the build and for the smoke's environments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

PROBE = "import sys; print('%d.%d' % sys.version_info[:2]); print(sys.executable)"
PROBE_TIMEOUT_S = 60


def _probe(argv: list[str]) -> tuple[str, str] | None:
    """(X.Y, executable) that ``argv`` runs, or None when it does not run."""
    try:
        proc = subprocess.run([*argv, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.strip().splitlines()
    return (lines[0], lines[1]) if proc.returncode == 0 and len(lines) == 2 else None


def find_python(version: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The interpreter for Python X.Y: the one running torchbuild when it matches, else ``pythonX.Y`` on PATH if it
    really runs as X.Y (a pyenv shim of a version that is not active is on PATH and fails: "pyenv: python3.12: command
    not found"), else the Windows launcher's ``py -X.Y``."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    path = (environ if environ is not None else os.environ).get("PATH")
    candidate = shutil.which(f"python{version}", path=path)
    if candidate is not None and (found := _probe([candidate])) is not None and found[0] == version:
        return candidate
    launcher = shutil.which("py", path=path)
    if launcher is not None and (found := _probe([launcher, f"-{version}"])) is not None and found[0] == version:
        return found[1]
    return None
