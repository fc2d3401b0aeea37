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
        # Duplicates would build (and estimate, and give GitHub jobs for) one cell twice.
        ('python: ["3.11", "3.12",\n  "3.11"]\n', "matrix.yaml:2: 'python' lists '3.11' twice (lines 1 and 2)"),
        ("cuda: [cpu, cpu]\n", "'cuda' lists 'cpu' twice"),
        ("platforms: [linux-64, linux-64]\n", "'platforms' lists 'linux-64' twice"),
        # Every value checked for its type and range at load, not by a stage later.
        ("platforms: [linux-64, osx-arm64]\n", "matrix.yaml:1: unknown platform 'osx-arm64'; valid platforms:"),
        ("exclude:\n  - {platform: linux64}\n", "matrix.yaml:2: unknown platform 'linux64'"),
        ("build_number: -1\n", "'build_number' must be from 0 to 2147483647, not -1"),
        ("build_number: 99999999999999999999999\n", "'build_number' must be from 0 to 2147483647"),
        ("keep_nightlies: 0\n", "matrix.yaml:1: 'keep_nightlies' must be from 1 to 2147483647, not 0, e.g. "
         "keep_nightlies: 7"),
        ("keep_nightlies: weekly\n", "'keep_nightlies' must be an integer, not 'weekly'"),
        ("build:\n  timeout_hours: 0\n", "matrix.yaml:2: 'timeout_hours' must be more than 0 and at most 744, not 0"),
        ("build:\n  timeout_hours: -3\n", "'timeout_hours' must be more than 0"),
        ("build:\n  timeout_hours: .inf\n", "'timeout_hours' must be"),
        ("build:\n  timeout_hours: 1e308\n", "'timeout_hours' must be more than 0 and at most 744, not 1e308"),
        ("build:\n  timeout_hours: .nan\n", "'timeout_hours' must be"),
        ("build:\n  max_jobs: 0\n", "build.max_jobs must be 'auto' or an integer from 1 to 4096, not '0'"),
        ("build:\n  max_jobs: 99999999999\n", "build.max_jobs must be 'auto' or an integer from 1 to 4096"),
        ("build:\n  max_jobs: \u0663\n", "build.max_jobs must be 'auto' or an integer"),  # an Arabic-Indic 3
    ],
)
def test_bad_matrix_is_named_with_line(text: str, message: str) -> None:
    with pytest.raises(MatrixError) as info:
        matrix.parse(text)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("name", "said"), [("nope.yaml", "no such file"), (".", "is a directory"), ("/dev/zero", "is not a regular file")]
)
def test_a_matrix_path_that_is_no_file_says_what_it_is(tmp_path: Path, name: str, said: str) -> None:
    with pytest.raises(MatrixError) as info:
        matrix.load(tmp_path / name)
    assert str(info.value) == f"{tmp_path / name}: {said}; give a matrix file (use --matrix PATH)."


def test_values_at_the_edges_of_their_ranges_load() -> None:
    m = matrix.parse("build_number: 2147483647\nbuild: {timeout_hours: 744, max_jobs: 4096}\n")
    assert (m.build_number, m.build.timeout_hours, m.build.max_jobs) == (2147483647, 744.0, "4096")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig", "utf-32"])
def test_a_matrix_with_a_byte_order_mark_loads(encoding: str, tmp_path: Path) -> None:
    # PowerShell 5's `>` writes UTF-16 LE with a byte-order mark; Notepad may add one to UTF-8.
    text = '# café\nplatforms: [linux-64]\npython: ["3.12"]\n'
    bom = {"utf-16-be": b"\xfe\xff"}.get(encoding, b"")
    path = tmp_path / "matrix.yaml"
    path.write_bytes(bom + text.encode(encoding))
    assert [c.id for c in matrix.load(path).cells()] == ["linux-64-cpu-py3.12"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"platforms: [linux-64]\n# caf\xe9 (Latin-1)\n", "matrix.yaml:2: the file is not valid UTF-8 (byte 0xe9"),
        ('python: ["3.12"]\n'.encode("utf-16-le"), "holds NUL characters (UTF-16 or UTF-32 without a byte-order"),
        (b"\xff\xfe" + b"p\x00y\x00\x00\xd8", "the file is not valid UTF-16"),  # a lone surrogate
    ],
)
def test_a_matrix_in_another_encoding_is_refused_naming_the_fix(data: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(data)
    with pytest.raises(MatrixError) as info:
        matrix.load(path)
    assert message in str(info.value) and "save it as UTF-8" in str(info.value)
