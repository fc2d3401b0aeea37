"""Where the verify stage's solve reads its repodata from: --repodata DIR, else $TORCHBUILD_REPODATA, else nothing
stored (the live channels). No default points outside the project (it was ../shared/data/repodata, a folder beside
the checkout that no user has)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.commands import cli


def _options(*args: str) -> Path | None:
    return cli.run_options(cli.build_parser().parse_args(["run", *args])).repodata


def _pipeline(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **env}
    argv = [sys.executable, str(ROOT / "pipeline.py"), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)


def test_without_option_or_variable_nothing_stored_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHBUILD_REPODATA", raising=False)
    assert _options() is None
    shown = _pipeline("run", "--help", env={}).stdout
    assert "shared" not in shown
    assert "$TORCHBUILD_REPODATA; without either, the live channels, cached; where they cannot be reached the cell " \
           "ends unverified, exit 3" in " ".join(shown.split())


def test_the_variable_gives_the_stored_repodata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rd" / "conda-forge" / "linux-64").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCHBUILD_REPODATA", "rd")
    assert _options() == tmp_path / "rd"  # absolute, as --repodata's
    (tmp_path / "other").mkdir()
    assert _options("--repodata", "other") == tmp_path / "other"  # the option wins


def test_a_variable_naming_no_directory_is_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _pipeline("plan", "--cuda", "cpu", "--py", "3.11", env={"TORCHBUILD_REPODATA": str(tmp_path / "none")})
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: TORCHBUILD_REPODATA={tmp_path / 'none'}: no such directory; give a directory with "
        "<channel>/<subdir>/repodata.json, or unset it to solve against the live channels."
    )
