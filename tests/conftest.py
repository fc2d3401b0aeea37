from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.pe_fixtures import PeFixtures, build
from torchbuild.platforms.windows import wine

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


@pytest.fixture
def pip_sees_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip (and so uv) sees only the folder returned (``tmp_path/links``, for the test to fill): no configuration
    files, no index, no PIP_* or UV_* variable of the caller's."""
    for name in [n for n in os.environ if n.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    folder = tmp_path / "links"
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


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
def needs_wine() -> None:
    """Skips the tests that use it where Wine is not installed (``pytestmark = pytest.mark.usefixtures(...)``)."""
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")


@pytest.fixture(scope="session")
def pe_fixtures(tmp_path_factory: pytest.TempPathFactory) -> PeFixtures:
    """Real PE files built with mingw-w64 once a session (tests/pe_fixtures.py): AMD64 and I386 DLLs, an AMD64
    executable, an extension; the tests copy them, never change them."""
    return build(tmp_path_factory.mktemp("pe"))


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 server (moto's, in this process) on 127.0.0.1, for the S3 channel's tests."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
