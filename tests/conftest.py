from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
# The stored real repodata the solve tests pass explicitly (--repodata, RunOptions.repodata): $TORCHBUILD_REPODATA,
# else ../shared/data/repodata beside the checkout (the product itself has no default: it solves live, or unverified).
REPODATA = Path(os.environ.get("TORCHBUILD_REPODATA") or SHARED / "data" / "repodata").resolve()
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


# module_scratch's folder maker: a name in, a fresh folder out
Scratch = Callable[[str], Path]


@pytest.fixture(scope="module")
def module_scratch(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Scratch]:
    """Folders for the pipeline runs a module's tests share, removed when the module ends with none of its tests
    failed: the disk holds one module's runs (a few GB each) at a time, not the whole session's (CI's disk filled with
    them once). A failure keeps them to look at."""
    made: list[Path] = []
    failed_before = request.session.testsfailed

    def make(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    if request.session.testsfailed == failed_before:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 server (moto's, in this process) on 127.0.0.1, for the S3 channel's tests."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
