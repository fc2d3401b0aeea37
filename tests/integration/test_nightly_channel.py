"""Nightlies publish beside releases without mixing, and ``index --keep-nightlies N`` keeps the newest N nights.

Three nights of a small real nightly build (a .conda by py-rattler-build, a wheel; ``2.13.0.devYYYYMMDD``) and a
release (2.13.0) are published with the real CLI into one local channel; the indexes are py-rattler's, read back by
pip (``pip download`` from the file:// index) and by py-rattler's solver, as users would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import ROOT, Scratch
from tests.integration.support_conda import assemble_small
from tests.integration.support_faults import Build, index, problems, publish, snapshot
from torchbuild.channels import pep503

NIGHTS = ("20251103", "20251104", "20251105")
TAGS = "cp311-cp311-manylinux_2_28_x86_64"


def build_of(directory: Path, version: str, wheel_version: str) -> Build:
    """A real conda package ``pytorch`` (no dependencies, so py-rattler solves it alone) and a real torch wheel."""
    directory.mkdir(parents=True)
    blob = version.encode() * 64
    conda = assemble_small(directory, {"lib/blob.bin": blob}, name="pytorch", version=version,
                           build="py3.11_cpu_0", depends=())  # fmt: skip
    wheel = make_wheel(directory, f"torch-{wheel_version}-{TAGS}.whl", {"torch/__init__.py": blob})
    return Build(conda=conda, wheel=wheel)


@dataclass(frozen=True)
class Published:
    channel: Path
    outputs: list[str]  # each publish's stdout + stderr, the release's first
    release: dict[str, bytes]  # the release's files and indexes after its publish


@pytest.fixture(scope="module")
def published(module_scratch: Scratch) -> Published:
    root = module_scratch("nightly")
    channel = root / "channel"
    release = build_of(root / "release", "2.13.0", "2.13.0+cpu")
    outputs = []
    result = publish(channel, *release.files)
    assert result.returncode == 0, result.stdout + result.stderr
    outputs.append(result.stdout + result.stderr)
    for night in NIGHTS:
        build = build_of(root / night, f"2.13.0.dev{night}", f"2.13.0.dev{night}+cpu")
        result = publish(channel, *build.files)
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    return Published(channel, outputs, release_files(channel))


def release_files(channel: Path) -> dict[str, bytes]:
    """The releases' part of a channel: the top conda subdirs and the whl/simple pages with their files."""
    return {path: data for path, data in snapshot(channel).items() if not path.startswith(("label/", "whl/nightly/"))
            and path != ".torchbuild-channel"}  # fmt: skip


def listed(repodata: Path) -> list[str]:
    data = json.loads(repodata.read_text(encoding="utf-8"))
    return sorted([*data.get("packages", {}), *data.get("packages.conda", {})])


def nightly_wheel(night: str) -> str:
    return f"torch-2.13.0.dev{night}+cpu-{TAGS}.whl"


def nightly_package(night: str) -> str:
    return f"pytorch-2.13.0.dev{night}-py3.11_cpu_0.conda"


def test_nightlies_go_under_nightly_paths_and_releases_indexes_never_list_them(published: Published) -> None:
    channel = published.channel
    assert listed(channel / "linux-64" / "repodata.json") == ["pytorch-2.13.0-py3.11_cpu_0.conda"]
    assert listed(channel / "label/nightly/linux-64/repodata.json") == [nightly_package(n) for n in NIGHTS]
    assert (channel / "label/nightly/noarch/repodata.json").is_file()  # a conda channel of its own
    release_page = (channel / "whl/simple/torch/index.html").read_text()
    assert sorted(pep503.wheel_links(release_page)) == [f"torch-2.13.0+cpu-{TAGS}.whl"]
    nightly_page = (channel / "whl/nightly/simple/torch/index.html").read_text()
    assert sorted(pep503.wheel_links(nightly_page)) == [nightly_wheel(n) for n in NIGHTS]
    assert pep503.project_links((channel / "whl/nightly/simple/index.html").read_text()) == {"torch"}
    assert problems(channel) == []
    # The publish says where each went and how to install it.
    url = channel.resolve().as_uri()
    assert f"pip install --index-url {url}/whl/simple torch" in published.outputs[0]
    assert f"conda install -c {url} pytorch" in published.outputs[0]
    assert f"new       whl/nightly/simple/torch/{nightly_wheel(NIGHTS[0])}" in published.outputs[1]
    assert f"new       label/nightly/linux-64/{nightly_package(NIGHTS[0])}" in published.outputs[1]
    assert f"pip install --pre --index-url {url}/whl/nightly/simple torch" in published.outputs[1]
    assert f"conda install -c {url}/label/nightly pytorch" in published.outputs[1]
    # Publishing the nightlies left the releases' files and indexes byte for byte as they were.
    assert release_files(channel) == published.release


def pip_download(index_url: str, requirement: str, into: Path, pre: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--no-cache-dir",
         *(["--pre"] if pre else []), "--index-url", index_url, "--dest", str(into), requirement],
        capture_output=True, text=True, check=False, timeout=120, env=ALONE,
    )  # fmt: skip


# Only the index given: no pip configuration (this machine's adds local wheel folders and indexes).
ALONE = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}

SOLVE = """
import asyncio, os, sys
from rattler import MatchSpec, solve

async def main():
    records = await solve([sys.argv[1]], [MatchSpec("pytorch")], platforms=["linux-64", "noarch"])
    for r in records:
        print(r.name.normalized, r.version, r.channel)

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # py-rattler can crash at interpreter exit (see torchbuild/conda/rattler_child.py)
"""


def solve(channel_url: str) -> str:
    result = subprocess.run([sys.executable, "-c", SOLVE, channel_url], capture_output=True, text=True, check=False,
                            timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def pruned(published: Published) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "index", "--channel", str(published.channel), "--keep-nightlies",
         "2"], capture_output=True, text=True, check=False, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    return result


def test_keep_nightlies_removes_the_oldest_night_from_files_and_indexes_and_leaves_releases(
    published: Published, pruned: subprocess.CompletedProcess[str]
) -> None:
    # Before: index had no --keep-nightlies (argparse: unrecognized arguments, exit 2).
    channel, oldest = published.channel, NIGHTS[0]
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert "kept the newest 2 nights, removed 2 older nightly files" in pruned.stdout
    assert f"removed label/nightly/linux-64/{nightly_package(oldest)}" in pruned.stdout
    assert f"removed whl/nightly/simple/torch/{nightly_wheel(oldest)}" in pruned.stdout
    assert not (channel / "label/nightly/linux-64" / nightly_package(oldest)).exists()
    assert not (channel / "whl/nightly/simple/torch" / nightly_wheel(oldest)).exists()
    assert not (channel / "whl/nightly/simple/torch" / (nightly_wheel(oldest) + ".sha256")).exists()
    assert listed(channel / "label/nightly/linux-64/repodata.json") == [nightly_package(n) for n in NIGHTS[1:]]
    nightly_page = (channel / "whl/nightly/simple/torch/index.html").read_text()
    assert sorted(pep503.wheel_links(nightly_page)) == [nightly_wheel(n) for n in NIGHTS[1:]]
    assert problems(channel) == []
    # The release: its files and its indexes byte for byte as they were.
    assert release_files(channel) == published.release


def test_installers_get_the_newest_nightly_from_the_nightly_index_and_the_release_from_the_plain_one(
    published: Published, pruned: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    url = published.channel.resolve().as_uri()
    got = pip_download(f"{url}/whl/nightly/simple", "torch", tmp_path / "nightly", pre=True)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "nightly").iterdir()] == [nightly_wheel(NIGHTS[-1])]
    got = pip_download(f"{url}/whl/simple", "torch", tmp_path / "release", pre=True)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "release").iterdir()] == [f"torch-2.13.0+cpu-{TAGS}.whl"]
    missing = pip_download(f"{url}/whl/simple", f"torch==2.13.0.dev{NIGHTS[-1]}", tmp_path / "none", pre=True)
    assert missing.returncode != 0 and "No matching distribution" in missing.stdout + missing.stderr
    pruned_night = pip_download(f"{url}/whl/nightly/simple", f"torch==2.13.0.dev{NIGHTS[0]}", tmp_path / "x", pre=True)
    assert pruned_night.returncode != 0
    assert f"pytorch 2.13.0.dev{NIGHTS[-1]} {url}/label/nightly" in solve(f"{url}/label/nightly")
    assert f"pytorch 2.13.0 {url}" in solve(url)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("0", "--keep-nightlies takes a number of nights, at least 1"),
        ("-1", "--keep-nightlies takes a number of nights, at least 1"),
        ("two", "--keep-nightlies takes a number of nights, at least 1"),
        ("", "argument --keep-nightlies: is empty: give a value"),  # an unset CI variable is no "keep every night"
    ],
)
def test_a_bad_keep_nightlies_is_refused_naming_the_flag_and_changes_nothing(
    published: Published, given: str, said: str
) -> None:
    before = snapshot(published.channel)
    result = index_keeping(published.channel, given)
    assert result.returncode == 2, result.stdout + result.stderr
    assert said in " ".join((result.stdout + result.stderr).split())
    assert "Traceback" not in result.stderr
    assert snapshot(published.channel) == before


def index_keeping(channel: Path, keep: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "index", "--channel", str(channel), f"--keep-nightlies={keep}"],
        capture_output=True, text=True, check=False, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_a_nightly_put_among_the_releases_is_refused_by_index_naming_where_it_belongs(tmp_path: Path) -> None:
    build = build_of(tmp_path / "build", f"2.13.0.dev{NIGHTS[0]}", f"2.13.0.dev{NIGHTS[0]}+cpu")
    release = build_of(tmp_path / "release", "2.13.0", "2.13.0+cpu")
    channel = tmp_path / "channel"
    assert publish(channel, *release.files).returncode == 0
    (channel / "whl/simple/torch" / build.wheel.name).write_bytes(build.wheel.read_bytes())
    before = snapshot(channel)
    result = index(channel)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"a nightly wheel belongs in {channel / 'whl/nightly/simple'}/<its project>/" in result.stderr
    assert snapshot(channel) == before
