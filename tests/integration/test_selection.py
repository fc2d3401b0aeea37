"""CPU vs CUDA selection, proven with the solver: a channel holding a CPU and a CUDA build of the same version
(made by the conda stage from the Plans of two real cells), solved with py-rattler next to the real conda-forge
repodata, as a user's machine with and without an NVIDIA driver reports itself (the __cuda virtual package).

torch 2.8.0 and CUDA 12.9: the conda-forge repodata here has cuda-cudart only for 12.9, so a CUDA cell of that
version is one whose dependencies really are installable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import source_info, torch_plan
from tests.conftest import REPODATA, Scratch
from tests.integration.support_conda import tiny_torch_wheel
from torchbuild.conda import solve
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda

TORCH = "2.8.0"
CUDA = "12.9"


@dataclass(frozen=True)
class Channel:
    path: Path
    cpu: Plan
    cuda: Plan


def _package(root: Path, plan: Plan) -> Path:
    wheel = tiny_torch_wheel(root / "wheels", plan, ("filelock",))
    inputs = {"repaired_wheel": Artifact.of(wheel), "source_info": source_info(root / "source", wheel)}
    ctx = Context(plan=plan, root=root, options=RunOptions(compression_level=1), inputs=inputs)
    return conda.run(ctx).outputs["conda_package"].path


@pytest.fixture(scope="module")
def channel(module_scratch: Scratch) -> Channel:
    if not (REPODATA / "conda-forge" / "win-64" / "repodata.json").is_file():
        pytest.skip(f"skipped: the real repodata is not at {REPODATA}")
    root = module_scratch("selection")
    cpu = torch_plan("win-64", "cpu", "3.11", TORCH)
    cuda = torch_plan("win-64", CUDA, "3.11", TORCH)
    assert cpu.root.conda.version == cuda.root.conda.version
    packages = [_package(root, cpu), _package(root, cuda)]
    return Channel(solve.make_local_channel(packages, root / "channel"), cpu, cuda)


def _pytorch(channel: Channel, specs: list[str], cuda: str | None) -> str:
    solution = solve.solve(
        [channel.path, REPODATA / "conda-forge"],
        specs,
        "win-64",
        solve.virtual_packages_for("win-64", cuda),
    )
    return next(s.build for s in solution if s.name == "pytorch")


def test_with_a_driver_the_cuda_build_is_chosen(channel: Channel) -> None:
    assert _pytorch(channel, ["pytorch", "python 3.11.*"], CUDA) == channel.cuda.root.conda.build_string


def test_without_a_driver_the_cpu_build_is_chosen(channel: Channel) -> None:
    assert _pytorch(channel, ["pytorch", "python 3.11.*"], None) == channel.cpu.root.conda.build_string


def test_asking_for_the_cpu_build_gets_it_even_with_a_driver(channel: Channel) -> None:
    assert _pytorch(channel, ["pytorch=*=*cpu*", "python 3.11.*"], CUDA) == channel.cpu.root.conda.build_string


def test_cpuonly_marker_excludes_the_cuda_build(channel: Channel) -> None:
    """The CUDA build's run_constrained `cpuonly <0a0` cannot hold once anything asks for `cpuonly`."""
    with pytest.raises(solve.Unsolvable):
        solve.solve(
            [channel.path, REPODATA / "conda-forge"],
            [f"pytorch=*=*cuda{CUDA}*", "cpuonly", "python 3.11.*"],
            "win-64",
            solve.virtual_packages_for("win-64", CUDA),
        )


def test_cuda_build_needs_a_new_enough_driver(channel: Channel) -> None:
    with pytest.raises(solve.Unsolvable):
        solve.solve(
            [channel.path, REPODATA / "conda-forge"],
            [f"pytorch=*=*cuda{CUDA}*", "python 3.11.*"],
            "win-64",
            solve.virtual_packages_for("win-64", "11.8"),
        )
