"""Every install line ``pipeline.py publish`` prints works, on a release, an own build and a nightly (issue 55): each
``pip install`` line, run with a stand-in for PyPI that offers a NEWER torch and companion (tests/install_lines.py),
installs the channel's files; each ``conda install`` line solves against the channel (and the stored conda-forge,
which has its own pytorch) and takes the channel's packages. A nightly's companion is published in the nightly places
beside its torch, and ``index --keep-nightlies`` prunes its nights with torch's.

The packages are FIXTURES: small real wheels and .conda packages (py-rattler-build) named as the stages name a cell's
torch and a companion compiled beside it (``visionfixture``, pinning the exact torch build), three of each kind; the
run's own printed lines are checked on real artifacts by tests/integration/test_compiled_companions.py. The same
function makes both (channels.install_lines)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import REPODATA, ROOT
from tests.install_lines import NEWER, conda_takes, pip_takes, printed, pypi_stand_in
from tests.integration.support_conda import assemble_small
from tests.integration.support_faults import publish

TAGS = "cp311-cp311-manylinux_2_28_x86_64"
COMPANION = "visionfixture"


@dataclass(frozen=True)
class Kind:
    """One kind of torch build, with a companion compiled beside it: versions and build strings as the Plan names
    them."""

    torch: str  # the wheel's version
    build: str  # the conda packages' build string
    companion: str  # the companion's wheel version

    @property
    def conda_version(self) -> str:
        return self.torch.split("+")[0]


RELEASE = Kind("2.13.0+cpu", "py3.11_cpu_0", "0.1.0a0+1a2b3c4")
# Beside an own build, a companion of a release's version (as PyPI's torchaudio 2.11.0, which names no torch): before,
# only pre-releases were pinned, and the stand-in's 99.0 replaced it.
OWN = Kind("2.13.0a0+git1eba9b3", "py3.11_cpu_git1eba9b3_0", "0.1.0")
NIGHTS = ("20251103", "20251104", "20251105")


def nightly(night: str) -> Kind:
    return Kind(f"2.13.0.dev{night}+cpu", "py3.11_cpu_0", f"0.1.0.dev{night}+cpu")


def build(folder: Path, kind: Kind) -> list[Path]:
    """torch's and the companion's wheel and conda package, the companion's pinning torch's exact build (wheel and
    conda package alike, as the stages make them)."""
    folder.mkdir(parents=True)
    conda_companion = kind.companion.split("+")[0]
    label = kind.companion.split("+")[1] if "+" in kind.companion and "dev" not in kind.companion else ""
    companion_build = kind.build.replace("_cpu_", f"_cpu_{label}_") if label else kind.build
    blob = kind.torch.encode() * 16
    return [
        make_wheel(folder, f"torch-{kind.torch}-{TAGS}.whl", {"torch/__init__.py": blob}),
        make_wheel(folder, f"{COMPANION}-{kind.companion}-{TAGS}.whl", {f"{COMPANION}/__init__.py": blob},
                   requires=[f"torch=={kind.torch}"]),
        assemble_small(folder, {"lib/blob.bin": blob}, name="pytorch", version=kind.conda_version, build=kind.build,
                       depends=()),
        assemble_small(folder, {"lib/vf.bin": blob}, name=COMPANION, version=conda_companion, build=companion_build,
                       depends=(f"pytorch =={kind.conda_version} {kind.build}",)),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pypi_stand_in(tmp_path_factory.mktemp("pypi"), "torch", COMPANION)


def published(tmp_path: Path, *kinds: Kind) -> tuple[Path, str]:
    channel = tmp_path / "channel"
    said = ""
    for number, kind in enumerate(kinds):
        done = publish(channel, *build(tmp_path / f"build{number}", kind))
        assert done.returncode == 0, done.stdout + done.stderr
        said = done.stdout
    return channel, said


def lines_take_the_channels_files(said: str, channel: Path, kind: Kind, stand_in: Path, report: Path) -> None:
    (pip,) = printed(said, "pip")
    taken = pip_takes(pip, stand_in, report)
    assert {name: t.version for name, t in taken.items()} == {"torch": kind.torch, COMPANION: kind.companion}, pip
    assert all(t.source.startswith(channel.resolve().as_uri()) for t in taken.values()), taken
    (conda,) = printed(said, "conda")
    solved = conda_takes(conda, also=((REPODATA / "conda-forge").as_uri(),))
    assert solved["pytorch"].version == f"{kind.conda_version} {kind.build}", solved
    assert solved[COMPANION].version.startswith(kind.companion.split("+")[0])
    assert {solved[name].source.rstrip("/") for name in ("pytorch", COMPANION)} == {conda.split()[3].rstrip("/")}


@pytest.mark.parametrize("kind", [RELEASE, OWN], ids=["release", "own-build"])
def test_a_release_and_an_own_builds_install_lines_take_the_channels_torch_and_companion(
    tmp_path: Path, stand_in: Path, kind: Kind
) -> None:
    # Before: `pip install --index-url <channel>/whl/simple torch visionfixture` took the stand-in's 99.0 of both.
    channel, said = published(tmp_path, kind)
    url = channel.resolve().as_uri()
    lines_take_the_channels_files(said, channel, kind, stand_in, tmp_path / "report.json")
    # --pre: the release's companion compiled from a checkout is 0.1.0a0, the own build's torch 2.13.0a0
    assert f"pip install --pre --index-url {url}/whl/simple torch=={kind.torch} {COMPANION}=={kind.companion}" in said
    assert NEWER not in said


def test_a_nightlys_companion_is_published_kept_and_pruned_beside_its_torch_and_its_lines_take_them(
    tmp_path: Path, stand_in: Path
) -> None:
    channel, said = published(tmp_path, RELEASE, *(nightly(night) for night in NIGHTS))
    url, newest = channel.resolve().as_uri(), nightly(NIGHTS[-1])
    lines_take_the_channels_files(said, channel, newest, stand_in, tmp_path / "report.json")
    wheel = f"{COMPANION}-{newest.companion}-{TAGS}.whl"
    assert f"new       whl/nightly/simple/{COMPANION}/{wheel}" in said
    assert f"new       label/nightly/linux-64/{COMPANION}-0.1.0.dev{NIGHTS[-1]}-py3.11_cpu_0.conda" in said
    assert f"pip install --pre --index-url {url}/whl/nightly/simple torch=={newest.torch} " \
           f"{COMPANION}=={newest.companion}" in said  # fmt: skip
    assert f"conda install -c {url}/label/nightly pytorch {COMPANION}" in said
    # The releases' places hold the release's companion only, never a nightly's.
    assert sorted(p.name for p in (channel / "whl" / "simple" / COMPANION).glob("*.whl")) == [
        f"{COMPANION}-{RELEASE.companion}-{TAGS}.whl"]
    assert not list((channel / "linux-64").glob(f"{COMPANION}-0.1.0.dev*"))

    argv = [sys.executable, str(ROOT / "pipeline.py"), "index", "--channel", str(channel), "--keep-nightlies", "2"]
    pruned = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    oldest = nightly(NIGHTS[0])
    assert f"removed label/nightly/linux-64/{COMPANION}-0.1.0.dev{NIGHTS[0]}-py3.11_cpu_0.conda" in pruned.stdout
    assert f"removed whl/nightly/simple/{COMPANION}/{COMPANION}-{oldest.companion}-{TAGS}.whl" in pruned.stdout
    assert f"removed whl/nightly/simple/torch/torch-{oldest.torch}-{TAGS}.whl" in pruned.stdout
    kept = sorted(p.name for p in (channel / "label" / "nightly" / "linux-64").glob(f"{COMPANION}-*.conda"))
    assert kept == [f"{COMPANION}-0.1.0.dev{night}-py3.11_cpu_0.conda" for night in NIGHTS[1:]]
    assert (channel / "whl" / "simple" / COMPANION / f"{COMPANION}-{RELEASE.companion}-{TAGS}.whl").is_file()
