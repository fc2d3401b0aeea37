"""Linux CUDA cells take PyPI's unlabelled wheel where it is the cell's CUDA build: the pin step asks for the newest
release whose wheel and declared CUDA dependencies the indexes offer, and says why; the source stage proves the
wheel is that build before relabelling it. The wheels here are stand-ins (tests/builders.make_wheel) in a local
find-links folder: what the real PyPI cannot show (a CUDA dependency that is not offered)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.errors import StageFailed
from torchbuild.knowledge.compat import load
from torchbuild.pin import pin
from torchbuild.plan import probe, resolve
from torchbuild.stages import source

CELL = Cell(platform="linux-64", cuda="12.8", python="3.11", torch="latest")
MATRIX = matrix.parse("build:\n  max_jobs: 8\n", "test-matrix.yaml")
TAG = "cp311-cp311-manylinux_2_28_x86_64"
RUNTIME_12 = "nvidia-cuda-runtime-cu12==12.8.90"


def version_py(cuda: str) -> bytes:
    return f"__version__ = 'x'\ncuda: Optional[str] = '{cuda}'\n".encode()


@pytest.fixture()
def links(pip_sees_only: Path) -> Path:
    """pip (and so uv) sees only this folder (tests/conftest.py), with two CUDA releases of torch in it."""
    folder = pip_sees_only
    make_wheel(folder, f"torch-2.11.0-{TAG}.whl", {"torch/version.py": version_py("13.0")},
               requires=["nvidia-cuda-runtime==13.0.96"])  # fmt: skip
    make_wheel(folder, f"torch-2.10.0-{TAG}.whl", {"torch/version.py": version_py("12.8")}, requires=[RUNTIME_12])
    return folder


def test_the_newest_release_whose_cuda_build_and_dependencies_are_offered(links: Path) -> None:
    release = load().release("2.11.0")
    assert release is not None
    query = probe(CELL, release)
    releases = ["2.11.0", "2.10.0", "2.9.1"]
    # 2.11.0's unlabelled wheel is CUDA 13.0: never asked for; 2.10.0's CUDA runtime is not offered yet
    assert pin.newest_available(query, releases) is None
    make_wheel(links, "nvidia_cuda_runtime_cu12-12.8.90-py3-none-manylinux2014_x86_64.whl", {"nvidia/x.so": b""})
    assert pin.newest_available(query, releases, fresh=True) == "2.10.0"


def test_the_pin_step_says_why_it_took_the_release() -> None:
    said = pin._cuda_reason(CELL, ["2.11.0", "2.10.0"], "2.10.0")
    assert said == (
        " (PyPI's unlabelled 2.10.0 wheel is its CUDA 12.8 build, and its CUDA libraries' pins resolve; "
        "2.11.0's is CUDA 13.0)"
    )
    assert pin._cuda_reason(Cell(platform="linux-64", cuda="cpu", python="3.11"), ["2.13.0"], "2.13.0") == ""


def test_source_proves_the_unlabelled_wheel_is_the_cells_cuda_build(links: Path, tmp_path: Path) -> None:
    plan = resolve(CELL, MATRIX, pinned="2.10.0")
    assert plan.prebuilt_unlabelled and plan.version == "2.10.0+cu128"
    (tmp_path / "out").mkdir()
    artifact, note = source._relabel(links / f"torch-2.10.0-{TAG}.whl", plan, tmp_path / "out", plan.torch)
    assert artifact.path.name == f"torch-2.10.0+cu128-{TAG}.whl"
    assert "proven by torch/version.py cuda = '12.8', nvidia-*-cu12 requirements" in note


def test_relabelling_drops_pypis_build_number(links: Path, tmp_path: Path) -> None:
    """PyPI's torch-2.10.0-3-... is a re-upload of 2.10.0; the relabelled wheel is a new version, without it."""
    plan = resolve(CELL, MATRIX, pinned="2.10.0")
    tagged = make_wheel(tmp_path / "tagged", f"torch-2.10.0-3-{TAG}.whl", {"torch/version.py": version_py("12.8")},
                        requires=[RUNTIME_12])  # fmt: skip
    with zipfile.ZipFile(tagged) as archive:
        assert "Build: 3" in archive.read("torch-2.10.0.dist-info/WHEEL").decode()
    (tmp_path / "out").mkdir()
    artifact, _note = source._relabel(tagged, plan, tmp_path / "out", plan.torch)
    assert artifact.path.name == plan.root.wheel == f"torch-2.10.0+cu128-{TAG}.whl"
    with zipfile.ZipFile(artifact.path) as archive:
        assert "Build:" not in archive.read("torch-2.10.0+cu128.dist-info/WHEEL").decode()


def test_source_refuses_an_unlabelled_wheel_of_another_cuda(links: Path, tmp_path: Path) -> None:
    plan = resolve(CELL, MATRIX, pinned="2.10.0")
    impostor = make_wheel(tmp_path / "other", f"torch-2.10.0-{TAG}.whl", {"torch/version.py": version_py("13.0")},
                          requires=["nvidia-cuda-runtime-cu13==13.0.96"])  # fmt: skip
    with pytest.raises(StageFailed, match=r"is not a CUDA 12.8 build: its torch/version.py says cuda = '13.0' and its "
                       r"nvidia-\* requirements are for CUDA 13"):  # fmt: skip
        source._relabel(impostor, plan, tmp_path / "out", plan.torch)
