from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
REPODATA = SHARED / "data" / "repodata"


@pytest.fixture
def repodata() -> Path:
    if not REPODATA.is_dir():
        pytest.skip(f"skipped: the real repodata is not at {REPODATA} (../shared beside the clone)")
    return REPODATA


@pytest.fixture(autouse=True)
def _no_github_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test run inside GitHub Actions must not append to the job's real summary.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    os.environ.setdefault("COLUMNS", "200")
