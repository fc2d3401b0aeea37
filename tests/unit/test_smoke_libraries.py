"""The smoke's check that the libraries a wheel's declared requirements install are loaded from the environment
(not the system): a real shared object (gcc) loaded with ctypes in a real venv (uv), read from /proc/self/maps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.support_source_repair import build_so
from torchbuild.host import uv
from torchbuild.stages.smoke import resources

RESOURCES = Path(resources.__file__).parent
PROBE = """
import ctypes, json, sys
sys.path.insert(0, sys.argv[1])
import run_checks
checks_core = run_checks.load("checks_core")
ctypes.CDLL(sys.argv[2])
print(json.dumps(checks_core._loaded_from_environment(("libcudart.so.12", "libcublas.so.12"))))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="skipped: no /proc/self/maps (not Linux)")
def test_a_library_from_the_environment_passes_and_one_from_elsewhere_fails(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    uv.venv(venv, sys.executable, tmp_path / "uv.log")
    python = venv / "bin" / "python"
    site = venv / "lib/python3/site-packages"
    inside = build_so(site / "nvidia/cuda_runtime/lib/libcudart.so.12", soname="libcudart.so.12")
    outside = build_so(tmp_path / "system/libcudart.so.12", soname="libcudart.so.12")

    def probe(library: Path) -> tuple[str, list[str]]:
        out = subprocess.run([python, "-c", PROBE, str(RESOURCES), str(library)], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
        found, problems = json.loads(out)
        return str(found), list(problems)

    found, problems = probe(inside)
    assert problems == []
    assert found == (
        "1 of the declared requirements' libraries loaded, each from the environment "
        "(lib/python3/site-packages/nvidia/cuda_runtime/lib)"
    )
    _found, problems = probe(outside)
    assert problems == [
        f"{outside} was loaded from outside the environment ({venv}), not its requirement's"
    ]
