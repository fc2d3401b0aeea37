"""A cell ships packages (issue 41): torch first, then each package the stages build beside it, as Plan entries;
a stage declares the artifacts of every such package by kind, so a new package needs no declaration of its own."""

from __future__ import annotations

from tests.builders import torch_plan
from torchbuild.stages import declares, package_artifact
from torchbuild.stages.conda import stage as conda
from torchbuild.stages.repair import stage as repair


def test_the_plan_lists_torch_then_what_is_built_beside_it_with_what_each_links_against() -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    torch, vision = plan.packages
    assert (torch.name, torch.release, torch.wheel, torch.links_against) == ("torch", "2.5.1", plan.root.wheel, ())
    assert torch.conda.stem == "pytorch-2.5.1-py3.11_cpu_0"
    assert (vision.name, vision.release, vision.links_against) == ("torchvision", "0.20.1", ("torch",))
    assert vision.conda.filename == "torchvision-0.20.1-py3.11_cpu_0.conda"
    assert vision.torch_pin == "pytorch 2.5.1 py3.11_cpu_0"
    assert (plan.root, plan.dependents) == (torch, (vision,))
    assert [package_artifact("repaired_wheel", p) for p in plan.packages] == [
        "repaired_wheel", "repaired_wheel[torchvision]"]  # fmt: skip


def test_a_linux_cpu_cell_ships_torch_alone() -> None:
    assert [p.name for p in torch_plan("linux-64", "cpu", "3.11", "2.13.0").packages] == ["torch"]


def test_a_kind_declared_for_every_package_covers_any_package_but_not_the_era_names() -> None:
    assert declares(repair.STAGE.writes, "repaired_wheel[torchfixture]")
    assert declares(repair.STAGE.reads, "source_wheel[torchfixture]")
    assert not declares(repair.STAGE.writes, "conda_package[torchfixture]")
    assert not declares(repair.STAGE.reads, "source_wheel")  # torch's own is the build's built_wheel
    assert declares(conda.STAGE.writes, "conda_package[era:pytorch]")  # conda_package[era:*]
    assert declares(conda.STAGE.writes, "conda_package[era:torchvision]")
    assert not declares(("conda_package[*]",), "conda_package[era:pytorch]")
    assert not declares(("conda_package[era:*]",), "conda_package[torchvision]")
