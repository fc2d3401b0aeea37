"""matrix.yaml loading: what a user sees for good and bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell, MatrixError


def test_repo_matrix_loads_and_expands() -> None:
    m = matrix.load(ROOT / "matrix.yaml")
    cells = m.cells()
    assert len(cells) == len(m.platforms) * len(m.cuda) * len(m.python)
    assert m.channel == "channel"
    assert len({c.id for c in cells}) == len(cells)


def test_versions_keep_their_text() -> None:
    m = matrix.parse("cuda: [12.10, 9.0]\npython: [3.10]\nplatforms: [linux-64]\n")
    assert m.cuda == ("12.10", "9.0")
    assert m.python == ("3.10",)


def test_exclude_and_include() -> None:
    m = matrix.parse(
        """
platforms: [win-64, linux-64]
cuda: [cpu, "12.4"]
python: ["3.11"]
exclude:
  - {platform: linux-64, cuda: "12.4"}
include:
  - {platform: win-64, cuda: "9.0", python: "3.6", torch: "1.1.0"}
"""
    )
    ids = [c.id for c in m.cells()]
    assert ids == [
        "win-64-cpu-py3.11",
        "win-64-cuda12.4-py3.11",
        "linux-64-cpu-py3.11",
        "win-64-cuda9.0-py3.6-torch1.1.0",
    ]


def test_cell_id_is_stable_across_latest() -> None:
    assert Cell(platform="win-64", cuda="12.4", python="3.12").id == "win-64-cuda12.4-py3.12"
    assert Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.5.1").id == "linux-64-cpu-py3.11-torch2.5.1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pyton: ['3.11']\n", "matrix.yaml:1: unknown key 'pyton'. Did you mean 'python'?"),
        ("cuda: [cpu]\n\nplatfroms: [win-64]\n", "matrix.yaml:3: unknown key 'platfroms'. Did you mean 'platforms'?"),
        ("build:\n  max_job: 4\n", "matrix.yaml:2: unknown key 'max_job'. Did you mean 'max_jobs'?"),
        ("exclude:\n  - {cuad: '9.0'}\n", "matrix.yaml:2: unknown key 'cuad'. Did you mean 'cuda'?"),
        ("cuda: []\n", "matrix.yaml:1: 'cuda' is an empty list"),
        ("python: 3.11\n", "matrix.yaml:1: 'python' must be a list, e.g. python: [3.11]"),
        ("build_number: two\n", "matrix.yaml:1: 'build_number' must be an integer, not 'two'"),
        ("torch: [1, 2]\n", "matrix.yaml:1: 'torch' must be a single value, not a list"),
        ("cuda: [cpu\npython: [3.11]\n", "matrix.yaml:2: invalid YAML"),
        ("build:\n  generator: make\n", "build.generator 'make' is not one of ninja or visual-studio"),
        ("include:\n  - {cuda: '9.0'}\n", "an include entry needs platform or python"),
        ("", "the file is empty"),
    ],
)
def test_bad_matrix_is_named_with_line(text: str, message: str) -> None:
    with pytest.raises(MatrixError) as info:
        matrix.parse(text)
    assert message in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="no such matrix file"):
        matrix.load(tmp_path / "nope.yaml")
