"""The stored repodata can hold a package for some Pythons and not the cell's: conda-forge's win-64 subset has numpy
for Python 3.9-3.14 and none for 3.8, so a Python 3.8 cell's solve leaves numpy out (packaging.yaml `absent`) although
the name is there. Read from the real stored data; the corpus's 1.9.1/3.8 pair (torchvision 0.10.1 needs numpy)
failed TB302 before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.conftest import REPODATA
from torchbuild.stages.verify.solve import _admits_python, _leave_out_other_pythons, _names_for_python

CONDA_FORGE = REPODATA / "conda-forge"


@pytest.mark.skipif(not CONDA_FORGE.is_dir(), reason=f"skipped: no stored repodata at {CONDA_FORGE}")
def test_numpy_is_there_for_python_3_9_and_not_for_3_8_in_the_stored_win_64_subset() -> None:
    for_38 = _names_for_python(CONDA_FORGE, "win-64", "3.8")
    for_39 = _names_for_python(CONDA_FORGE, "win-64", "3.9")
    assert "python" in for_38 and "numpy" not in for_38
    assert "numpy" in for_39


@pytest.mark.parametrize(
    ("depends", "python", "admits"),
    [
        (["python >=3.8,<3.9.0a0"], "3.8", True),
        (["python >=3.9,<3.10.0a0"], "3.8", False),
        (["python_abi 3.8.* *_cp38"], "3.8", True),
        (["python_abi 3.13.* *_cp313"], "3.8", False),
        (["python >=3.7|3.6.*"], "3.6", True),
        (["python 3.8"], "3.8", True),
        (["numpy"], "3.8", True),  # no python dependency: any Python
    ],
)
def test_a_records_python_dependency_decides_whether_it_installs_beside_the_cells(
    depends: list[str], python: str, admits: bool
) -> None:
    assert _admits_python({"depends": depends}, python) is admits


@pytest.mark.skipif(not CONDA_FORGE.is_dir(), reason=f"skipped: no stored repodata at {CONDA_FORGE}")
def test_a_companions_dependency_the_subset_lacks_for_the_cells_python_is_left_out_and_said(tmp_path: Path) -> None:
    """torchvision 0.13.0 for Python 3.10 needs pillow; the stored win-64 subset has pillow for 3.8, 3.9 and 3.11 on,
    none for 3.10 (the corpus's 1.12.0/3.10 TB302 failed on it). numpy, which it has for 3.10, stays."""
    plan = torch_plan(platform="win-64", cuda="cpu", python="3.10", torch="1.12.0")
    local = tmp_path / "channel"
    (local / "win-64").mkdir(parents=True)
    vision = "torchvision-0.13.0-py3.10_cpu_0.conda"
    record = {"name": "torchvision", "version": "0.13.0", "build": "py3.10_cpu_0", "build_number": 0,
              "depends": ["python >=3.10,<3.11.0a0", "pytorch 1.12.0 py3.10_cpu_0", "numpy", "pillow >=5.3.0,!=8.3.*"]}
    (local / "win-64" / "repodata.json").write_text(json.dumps({"packages.conda": {vision: record}}))
    dropped = _leave_out_other_pythons(local, [CONDA_FORGE], plan, [local / vision], {"torchvision": local / vision})
    assert dropped == ["pillow >=5.3.0,!=8.3.* (stored: none for Python 3.10)"]
    left = json.loads((local / "win-64" / "repodata.json").read_text())["packages.conda"][vision]["depends"]
    assert left == ["python >=3.10,<3.11.0a0", "pytorch 1.12.0 py3.10_cpu_0", "numpy"]
