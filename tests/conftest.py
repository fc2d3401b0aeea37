from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
REPODATA = SHARED / "data" / "repodata"
NIGHTLY_ONLY = (
    "skipped: nightly only (CI's time cannot carry it; the nightly workflow runs `pytest -m nightly --nightly`)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nightly", action="store_true", help="also run the tests marked nightly (hours of real releases)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--nightly"):
        return
    for item in items:
        if item.get_closest_marker("nightly"):
            item.add_marker(pytest.mark.skip(reason=NIGHTLY_ONLY))


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
