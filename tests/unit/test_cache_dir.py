"""The default download cache is the user's cache folder as platformdirs knows it (XDG_CACHE_HOME on Linux,
%LOCALAPPDATA% on Windows), and `--help` says where it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CACHE_OF = "from torchbuild.config.options import RunOptions; print(RunOptions().cache_dir)"


@pytest.mark.skipif(sys.platform != "linux", reason="skipped: XDG_CACHE_HOME is Linux's")
def test_the_cache_follows_xdg_cache_home(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "caches")}
    shown = subprocess.run([sys.executable, "-c", CACHE_OF], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == str(tmp_path / "caches" / "torchbuild")
    helped = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "run", "--help"], env={**env, "COLUMNS": "300"},
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert f"download cache (default: {tmp_path / 'caches' / 'torchbuild'}, the user's cache folder)" in helped.stdout
