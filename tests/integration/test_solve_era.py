"""An old win-64 cell (torch 1.1.0, CUDA 9.0, Python 3.6) solves against `main` of 2018, the world of `vc 14` and
its track_features, without the UnsatisfiableError of source document 001 (`libiconv -> *[track_features=vc14]`
against `pytorch`). The package is the conda stage's real output for that Plan, made from a small wheel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import source_info, torch_plan
from tests.conftest import REPODATA
from tests.integration.support_conda import tiny_torch_wheel
from torchbuild.conda import solve as solver
from torchbuild.conda.checks.package import read_package
from torchbuild.config.options import RunOptions
from torchbuild.results import Artifact
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.verify import stage as verify

MAIN = REPODATA / "main"
pytestmark = pytest.mark.skipif(not MAIN.is_dir(), reason=f"skipped: no stored repodata at {MAIN}")


@pytest.fixture(scope="module")
def old_cell(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the package, a local channel holding only it)."""
    plan = torch_plan(platform="win-64", cuda="9.0", python="3.6", torch="1.1.0")
    tmp = tmp_path_factory.mktemp("old-cell")
    wheel = tiny_torch_wheel(tmp, plan)
    options = RunOptions(repodata=REPODATA, compression_level=3)
    inputs = {"repaired_wheel": Artifact.of(wheel), "source_info": source_info(tmp / "source", wheel)}
    ctx = Context(plan=plan, root=tmp / "work", options=options, inputs=inputs)
    package = conda.run(ctx).outputs["conda_package"].path
    return package, solver.make_local_channel([package], tmp / "channel")


def test_old_cell_depends_on_vc_14_without_features(old_cell: tuple[Path, Path]) -> None:
    index = read_package(old_cell[0]).index
    assert "vc >=14,<15" in index["depends"]
    assert "python >=3.6,<3.7.0a0" in index["depends"]
    assert not index.get("features") and not index.get("track_features")


def test_verify_solves_the_old_cell_against_main_2018(old_cell: tuple[Path, Path], tmp_path: Path) -> None:
    plan = torch_plan(platform="win-64", cuda="9.0", python="3.6", torch="1.1.0")
    pkg = read_package(old_cell[0])
    check = verify.solve_check(pkg.path, plan, REPODATA, tmp_path)
    assert check.status == "passed", check.message
    assert "with python 3.6." in check.message and "from main" in check.message
    # The stored 2018 subset has no win-64 numpy/mkl/intel-openmp/cudatoolkit (repodata README): the check says
    # it left exactly those out, and nothing else.
    left_out = check.message.split("left out, no record in the stored main data: ")[1]
    assert sorted(left_out.split(", ")) == ["cudatoolkit >=9.0,<9.1", "intel-openmp", "mkl >=2018", "numpy >=1.11"]


def test_an_environment_pinned_to_the_vc14_feature_build_still_takes_pytorch(
    old_cell: tuple[Path, Path], tmp_path: Path
) -> None:
    """Source document 001: an environment holding `vc 14` with track_features=vc14 (libiconv -> vc==14). Our
    package's plain `vc >=14,<15` dependency accepts that very record, so pytorch installs beside it. As in the
    verify stage, the dependencies the stored 2018 subset cannot serve (numpy, mkl, ...) are left out."""
    local = tmp_path / "channel"
    local.mkdir()
    for sub in ("win-64", "noarch"):
        (local / sub).mkdir()
        raw = json.loads((old_cell[1] / sub / "repodata.json").read_text())
        for record in (raw.get("packages.conda") or {}).values():
            record["depends"] = [d for d in record["depends"] if d.split()[0] in ("python", "vc", "__cuda")]
        (local / sub / "repodata.json").write_text(json.dumps(raw))
    virtual = solver.virtual_packages_for("win-64", "9.0")
    solution = solver.solve([local, MAIN], ["pytorch", "python 3.6.*", "vc ==14"], "win-64", virtual)
    by_name = {s.name: s for s in solution}
    assert by_name["pytorch"].version == "1.1.0"
    assert by_name["vc"].version == "14"
    vc_record = json.loads((MAIN / "win-64" / "repodata.json").read_text())["packages"][by_name["vc"].file_name]
    assert vc_record["track_features"] == "vc14"


@pytest.mark.parametrize(("python", "torch"), [("3.7", "1.10.1"), ("3.6", "1.8.0")])
def test_verify_says_skipped_where_the_stored_repodata_has_no_such_python(
    tmp_path: Path, python: str, torch: str
) -> None:
    """torch 1.10.1 for Python 3.7, and 1.8.0 for 3.6 (it depends on vc14_runtime and ucrt, which `main` of 2018
    never had), solve against conda-forge, whose stored subset has no python 3.6/3.7 for win-64: no solve can speak
    of the package there, so the check is skipped with that reason (not failed as unsolvable)."""
    plan = torch_plan(platform="win-64", cuda="cpu", python=python, torch=torch)
    wheel = tiny_torch_wheel(tmp_path, plan)
    options = RunOptions(repodata=REPODATA, compression_level=3)
    inputs = {"repaired_wheel": Artifact.of(wheel), "source_info": source_info(tmp_path / "source", wheel)}
    ctx = Context(plan=plan, root=tmp_path / "work", options=options, inputs=inputs)
    package = conda.run(ctx).outputs["conda_package"].path
    check = verify.solve_check(package, plan, REPODATA, tmp_path)
    assert (plan.solve.channel, check.status) == ("conda-forge", "skipped"), check.message
    assert check.message.endswith(f"repodata for win-64 has no python {python}.*"), check.message
    # the same package with a Python the subset has is solved, not skipped
    plan39 = torch_plan(platform="win-64", cuda="cpu", python="3.9", torch="1.10.1")
    wheel39 = tiny_torch_wheel(tmp_path / "py39", plan39)
    inputs39 = {"repaired_wheel": Artifact.of(wheel39), "source_info": source_info(tmp_path / "source39", wheel39)}
    ctx39 = Context(plan=plan39, root=tmp_path / "work39", options=options, inputs=inputs39)
    package39 = conda.run(ctx39).outputs["conda_package"].path
    solved = verify.solve_check(package39, plan39, REPODATA, tmp_path)
    assert solved.status == "passed", solved.message
