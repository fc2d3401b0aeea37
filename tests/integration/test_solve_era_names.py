"""A user's 2018 install lines (the seeds' guide: `conda install pytorch-cpu torchvision-cpu -c pytorch`, `conda
install pytorch torchvision cuda80 -c pytorch`, `... -c pytorch` for CUDA 9, `... cuda100 -c pytorch`) solve against
a channel our stages published for win-64 cells of torch 1.0.0 (CPU, CUDA 8.0, CUDA 9.0; Python 3.6).

No cell of that era can be built here (no compiler, no torch 1.0.0 wheel for a current Python), so each cell's
torch and torchvision wheels are FIXTURES: tiny pure-Python wheels under the Plans' names, made in the test. They go
through the real conda stage (torch, its torchvision companion, the era's names) and the real publish stage into a
local channel. As in test_solve_era.py, the run dependencies the stored 2018 `main` subset has no record of
(plan.solve.absent: numpy, mkl, intel-openmp, cudatoolkit; and torchvision's pillow) are left out of that channel's
index before solving; test_records_have_the_real_2018_shape checks that nothing else was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import make_wheel, source_info, torch_plan
from tests.conftest import REPODATA, Scratch
from tests.integration.support_conda import tiny_torch_wheel
from torchbuild.conda import solve as solver
from torchbuild.conda.checks.package import read_package
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.stages import Context, companion_artifact
from torchbuild.stages import publish as publish_stage
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.verify import stage as verify

MAIN = REPODATA / "main"
PYTORCH_2018 = REPODATA / "pytorch" / "linux-64" / "repodata.json"
TORCH, PYTHON = "1.0.0", "3.6"
# What the stored 2018 win-64 `main` has no record of (its README), of our packages' run dependencies: the cells'
# plan.solve.absent (packaging.yaml)
ABSENT = ("numpy", "mkl", "intel-openmp", "cudatoolkit", "pillow")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MAIN.is_dir(), reason=f"skipped: no stored repodata at {MAIN}"),
]


def _fixture_torchvision(directory: Path, plan: Plan) -> Path:
    """FIXTURE: a pure-Python wheel under the name of PyPI's torchvision the Plan pairs with its torch."""
    companion = next(c for c in plan.companions if c.name == "torchvision")
    files = {"torchvision/__init__.py": f"__version__ = '{companion.release}'\n".encode()}
    return make_wheel(directory, companion.wheel, files, requires=["numpy", "pillow >=4.1.1", "six"])


@pytest.fixture(scope="module")
def published(module_scratch: Scratch) -> tuple[Path, dict[str, dict[str, object]], Path]:
    """(a channel of the published packages, less what the 2018 subset lacks; the published index records by file
    name; the channel the publish stage wrote)."""
    root = module_scratch("era-names")
    options = RunOptions(repodata=REPODATA, compression_level=3)
    records: dict[str, dict[str, object]] = {}
    # The second CUDA 8.0 cell (Python 3.7, another source time) publishes cuda80-1.0-0 again: the same file, or the
    # channel would refuse it under its published name.
    for cuda, python, epoch in (("cpu", PYTHON, 0), ("8.0", PYTHON, 0), ("9.0", PYTHON, 0), ("8.0", "3.7", 86400)):
        plan = torch_plan(platform="win-64", cuda=cuda, python=python, torch=TORCH)
        fixtures = root / "fixtures" / f"{cuda}-{python}"
        wheel = tiny_torch_wheel(fixtures, plan)  # FIXTURE torch wheel
        vision = _fixture_torchvision(fixtures / "vision", plan)
        inputs = {
            "repaired_wheel": Artifact.of(wheel),
            "source_info": source_info(fixtures / "source", wheel, epoch=1_700_000_000 + epoch),
            companion_artifact("repaired_wheel", "torchvision"): Artifact.of(vision),
        }
        made = conda.run(Context(plan=plan, root=root, options=options, inputs=inputs)).outputs
        said = publish_stage.run(Context(plan=plan, root=root, options=options, inputs={**inputs, **made})).message
        if python != PYTHON:
            assert "win-64/cuda80-1.0-0.conda (unchanged)" in said, said
    channel = root / plan.channel
    stripped = root / "solvable"
    for subdir in ("win-64", "noarch"):
        (stripped / subdir).mkdir(parents=True)
        raw = json.loads((channel / subdir / "repodata.json").read_text())
        for key in ("packages", "packages.conda"):
            for file_name, record in (raw.get(key) or {}).items():
                records[file_name] = dict(record)
                record["depends"] = [d for d in record["depends"] if d.split()[0] not in ABSENT]
        (stripped / subdir / "repodata.json").write_text(json.dumps(raw))
    return stripped, records, channel


def _solve(channel: Path, line: str, cuda: str | None) -> dict[str, str]:
    """``conda install <line> -c <our channel>`` for Python 3.6 on a win-64 machine (with a driver for ``cuda``):
    name -> ``version build`` of what comes from our channel."""
    specs = [*line.split(), f"python {PYTHON}.*"]
    solution = solver.solve([channel, MAIN], specs, "win-64", solver.virtual_packages_for("win-64", cuda))
    ours = channel.resolve().as_uri()
    return {s.name: f"{s.version} {s.build}" for s in solution if s.channel.rstrip("/") == ours.rstrip("/")}


def test_pytorch_cpu_torchvision_cpu_takes_the_renamed_cpu_build(published: tuple[Path, dict, Path]) -> None:
    for cuda in (None, "10.0"):  # a machine with a driver gets the CPU build it asked for too
        assert _solve(published[0], "pytorch-cpu torchvision-cpu", cuda) == {
            "pytorch-cpu": f"{TORCH} py{PYTHON}_cpu_0",
            "torchvision-cpu": f"0.2.2.post3 py{PYTHON}_cpu_0",
        }
    assert _solve(published[0], "pytorch-cpu", None) == {"pytorch-cpu": f"{TORCH} py{PYTHON}_cpu_0"}


def test_cuda_selector_lines_take_the_build_of_that_cuda(published: tuple[Path, dict, Path]) -> None:
    channel = published[0]
    assert _solve(channel, "pytorch torchvision cuda80", "10.0") == {
        "pytorch": f"{TORCH} py{PYTHON}_cuda8.0_cudnn7_0",
        "torchvision": f"0.2.2.post3 py{PYTHON}_cuda8.0_cudnn7_0",
        "cuda80": "1.0 0",
    }
    cuda90 = {"pytorch": f"{TORCH} py{PYTHON}_cuda9.0_cudnn7_0", "cuda90": "1.0 0"}
    assert _solve(channel, "pytorch cuda90", "10.0") == cuda90
    # "for cuda9": no selector takes the release's default CUDA build, never the featured CUDA 8.0 one
    assert _solve(channel, "pytorch torchvision", "10.0") == {
        "pytorch": f"{TORCH} py{PYTHON}_cuda9.0_cudnn7_0",
        "torchvision": f"0.2.2.post3 py{PYTHON}_cuda9.0_cudnn7_0",
    }
    # without a driver, a bare `pytorch` is the CPU build
    assert _solve(channel, "pytorch", None) == {"pytorch": f"{TORCH} py{PYTHON}_cpu_0"}


def test_a_line_no_built_cell_serves_fails_naming_it(published: tuple[Path, dict, Path]) -> None:
    with pytest.raises(solver.Unsolvable) as no_cuda100:
        _solve(published[0], "pytorch torchvision cuda100", "10.0")
    assert "No candidates were found for cuda100" in str(no_cuda100.value)
    with pytest.raises(solver.Unsolvable) as no_driver:  # cuda80 on a machine without an NVIDIA driver
        _solve(published[0], "pytorch cuda80", None)
    assert "__cuda >=8.0, for which no candidates were found" in str(no_driver.value)


def test_records_have_the_real_2018_shape(published: tuple[Path, dict, Path]) -> None:
    records = published[1]
    real = json.loads(PYTORCH_2018.read_text())["packages"]
    real_cuda80 = real["cuda80-1.0-h205658b_0.tar.bz2"]
    ours = records["cuda80-1.0-0.conda"]
    for key in ("name", "version", "depends", "track_features"):
        assert ours[key] == real_cuda80[key], key
    assert records[f"pytorch-{TORCH}-py{PYTHON}_cuda8.0_cudnn7_0.conda"]["features"] == "cuda80"
    assert "features" not in records[f"pytorch-{TORCH}-py{PYTHON}_cuda9.0_cudnn7_0.conda"]  # the default CUDA
    cpu = records[f"pytorch-cpu-{TORCH}-py{PYTHON}_cpu_0.conda"]
    real_cpu = real[f"pytorch-cpu-{TORCH}-py{PYTHON}_cpu_1.tar.bz2"]
    # renamed, not a metapackage: like the real record it depends on no `pytorch`, and it carries the payload
    assert not [d for d in cpu["depends"] if d.split()[0] == "pytorch"]
    assert not [d for d in real_cpu["depends"] if d.split()[0] == "pytorch"]
    assert "features" not in cpu and "track_features" not in cpu and "features" not in real_cpu

    def payload(name: str) -> list[tuple[str, int]]:
        return sorted((m.name, m.size) for m in read_package(published[2] / "win-64" / name).pkg_members)

    renamed = payload(f"pytorch-cpu-{TORCH}-py{PYTHON}_cpu_0.conda")
    assert renamed == payload(f"pytorch-{TORCH}-py{PYTHON}_cpu_0.conda")
    assert any(name.endswith("torch/__init__.py") for name, _ in renamed)
    vision = records[f"torchvision-cpu-0.2.2.post3-py{PYTHON}_cpu_0.conda"]
    assert f"pytorch-cpu =={TORCH} py{PYTHON}_cpu_0" in vision["depends"]  # the cell's exact build
    assert not [d for d in vision["depends"] if d.split()[0] == "pytorch"]


def test_the_channel_holds_each_name_and_only_the_stored_subsets_gaps_were_left_out(
    published: tuple[Path, dict, Path],
) -> None:
    records = published[1].values()
    assert sorted({str(r["name"]) for r in records}) == [
        "cuda80", "cuda90", "pytorch", "pytorch-cpu", "torchvision", "torchvision-cpu"
    ]  # fmt: skip
    main_names = set()
    for subdir in ("win-64", "noarch"):
        raw = json.loads((MAIN / subdir / "repodata.json").read_text())
        main_names |= {r["name"] for key in ("packages", "packages.conda") for r in (raw.get(key) or {}).values()}
    ours = {str(r["name"]) for r in records}
    wanted = {d.split()[0] for r in records for d in r["depends"]}  # type: ignore[attr-defined]
    unserved = sorted(n for n in wanted - main_names - ours if not n.startswith("__"))
    assert unserved == sorted(ABSENT)


def test_tar_bz2_packages_carry_the_feature_and_the_tracked_feature(tmp_path: Path) -> None:
    """The same fields where the package is a .tar.bz2 (index.json inside the one bzip2 stream)."""
    plan = torch_plan(platform="win-64", cuda="8.0", python=PYTHON, torch=TORCH)
    wheel = tiny_torch_wheel(tmp_path / "fixture", plan)  # FIXTURE torch wheel
    options = RunOptions(repodata=REPODATA, compression_level=3, conda_format="tar.bz2")
    inputs = {"repaired_wheel": Artifact.of(wheel), "source_info": source_info(tmp_path / "source", wheel)}
    made = conda.run(Context(plan=plan, root=tmp_path, options=options, inputs=inputs)).outputs
    torch_index = read_package(made["conda_package"].path).index
    selector = made[companion_artifact("conda_package", "era:selector")].path
    assert (selector.name, read_package(selector).index["track_features"]) == ("cuda80-1.0-0.tar.bz2", "cuda80")
    assert (torch_index["features"], torch_index["build_number"]) == ("cuda80", 99)


def test_verify_solves_an_era_cell_with_its_torchvision(tmp_path: Path) -> None:
    """TB302 for a 2018-era cell: `pytorch torchvision` against `main` of 2018, with torchvision's numpy and pillow
    left out as the stored subset has no record of them (packaging.yaml's absent), and said so."""
    plan = torch_plan(platform="win-64", cuda="cpu", python=PYTHON, torch=TORCH)
    assert set(plan.solve.absent) == set(ABSENT)
    wheel = tiny_torch_wheel(tmp_path / "fixture", plan)  # FIXTURE torch wheel
    vision = _fixture_torchvision(tmp_path / "fixture" / "vision", plan)  # FIXTURE torchvision wheel
    options = RunOptions(repodata=REPODATA, compression_level=3)
    inputs = {
        "repaired_wheel": Artifact.of(wheel),
        "source_info": source_info(tmp_path / "source", wheel),
        companion_artifact("repaired_wheel", "torchvision"): Artifact.of(vision),
    }
    made = conda.run(Context(plan=plan, root=tmp_path, options=options, inputs=inputs)).outputs
    companions = {"torchvision": made[companion_artifact("conda_package", "torchvision")].path}
    check = verify.solve_check(made["conda_package"].path, plan, REPODATA, tmp_path, companions)
    assert (check.code, check.status) == ("TB302", "passed"), check.message
    left_out = check.message.split("left out, no record in the stored main data: ")[1].split("; ")[0]
    assert sorted(left_out.split(", ")) == ["intel-openmp", "mkl >=2018", "numpy", "numpy >=1.11", "pillow >=4.1.1"]
