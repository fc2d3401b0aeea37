"""The 2018 channel's names (data/era_names.yaml, knowledge/era_names.py): which cells publish pytorch-cpu,
torchvision-cpu and a cudaXY selector, checked against the stored real records, and what the Plan and the rendered
recipe of such a cell say."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders import torch_plan
from tests.conftest import REPODATA
from tests.unit.test_cli import pipeline
from torchbuild.errors import UserError
from torchbuild.knowledge import era_names
from torchbuild.stages.conda import era, recipe

PYTORCH_2018 = REPODATA / "pytorch" / "linux-64" / "repodata.json"
WIN_1_0 = ["cpu", "8.0", "9.0", "10.0"]  # releases.yaml: torch 1.0.0 on win-64


@pytest.mark.parametrize(
    ("torch", "cuda", "cudas", "cpu_package", "features", "selector", "constrains"),
    [
        ("1.0.0", "cpu", WIN_1_0, "pytorch-cpu", (), None, ("cuda80 <0a0", "cuda90 <0a0", "cuda100 <0a0")),
        ("1.1.0", "cpu", ["cpu", "9.0", "10.0"], "pytorch-cpu", (), None, ()),
        ("1.2.0", "cpu", ["cpu", "9.2", "10.0"], "", (), None, ()),
        ("1.0.0", "8.0", WIN_1_0, "", ("cuda80",), "cuda80", ("cuda90 <0a0", "cuda100 <0a0")),
        ("1.0.0", "9.0", WIN_1_0, "", (), "cuda90", ("cuda80 <0a0", "cuda100 <0a0")),  # the default CUDA
        ("0.4.0", "9.0", ["cpu", "8.0", "9.0", "9.1"], "", ("cuda90",), "cuda90", ("cuda80 <0a0", "cuda91 <0a0")),
        ("0.4.0", "8.0", ["cpu", "8.0", "9.0", "9.1"], "", (), "cuda80", ("cuda90 <0a0", "cuda91 <0a0")),
        ("0.4.1", "9.2", ["cpu", "8.0", "9.0", "9.2"], "", ("cuda92",), "cuda92", ("cuda80 <0a0", "cuda90 <0a0")),
        ("1.0.1", "10.0", ["cpu", "9.0", "10.0"], "", (), None, ()),  # features gone: cudatoolkit pins instead
    ],
)
def test_names_of_a_cell(
    torch: str, cuda: str, cudas: list[str], cpu_package: str, features: tuple[str, ...], selector: str | None,
    constrains: tuple[str, ...],
) -> None:  # fmt: skip
    names = era_names.for_cell(torch, cuda, cudas)
    assert names.cpu_package == cpu_package
    assert names.companions == ({"torchvision": "torchvision-cpu"} if cpu_package else {})
    assert names.features == features
    assert (names.selector.stem if names.selector else None) == (f"{selector}-1.0-0" if selector else None)
    assert names.constrains == constrains
    assert names.build_number_offset == (-1 if features else 0)


def _stored() -> dict[str, Any]:
    if not PYTORCH_2018.is_file():
        pytest.skip(f"skipped: no stored repodata at {PYTORCH_2018}")
    packages: dict[str, Any] = json.loads(PYTORCH_2018.read_text())["packages"]
    return packages


def test_the_cpu_name_covers_exactly_the_releases_the_real_channel_published_it_for() -> None:
    table = era_names.load()
    versions = {r["version"] for r in _stored().values() if r["name"] == table.cpu_package}
    assert sorted(versions) == ["0.3.0", "0.3.1", "0.4.0", "0.4.1", "1.0.0", "1.0.1", "1.1.0"]
    assert all(v in table.cpu_torch for v in versions)
    assert "1.2.0" not in table.cpu_torch and "0.2.0" not in table.cpu_torch
    # the real CPU companion depends on the CPU name, never on `pytorch`
    vision = [r for r in _stored().values() if r["name"] == table.cpu_companions["torchvision"]]
    assert vision and all(any(d.startswith("pytorch-cpu ") for d in r["depends"]) for r in vision)


def test_selectors_have_the_shape_of_the_real_metapackages() -> None:
    table = era_names.load()
    real = {r["name"]: r for r in _stored().values() if r.get("track_features", "").startswith("cuda")}
    assert sorted(real) == ["cuda100", "cuda75", "cuda80", "cuda90", "cuda91", "cuda92"]
    for cuda in ("7.5", "8.0", "9.0", "9.1", "9.2", "10.0"):
        record = real[era_names.selector_name(cuda)]
        assert (record["version"], record["depends"], record["track_features"]) == (
            table.selector_version, [], era_names.selector_name(cuda)
        )  # fmt: skip
    assert real["cuda80"]["timestamp"] // 1000 == table.selector_timestamp


def test_plan_of_a_featured_cell_ranks_below_the_default_and_forbids_other_selectors() -> None:
    featured, default = torch_plan("win-64", "8.0", "3.6", "1.0.0"), torch_plan("win-64", "9.0", "3.6", "1.0.0")
    assert featured.root.conda.build_number == default.root.conda.build_number - 1 == 99
    assert featured.root.conda.constrains == ("cpuonly <0a0", "cuda90 <0a0", "cuda100 <0a0")
    assert default.root.conda.constrains == ("cpuonly <0a0", "cuda80 <0a0", "cuda100 <0a0")
    modern = torch_plan("win-64", "12.4", "3.11", "2.5.1")
    assert modern.conda.era.empty and modern.root.conda.constrains == ("cpuonly <0a0",)


def test_the_recipe_carries_the_feature(tmp_path: Any) -> None:
    featured = recipe.render(torch_plan("win-64", "8.0", "3.6", "1.0.0"), tmp_path / "featured")
    assert featured.meta["build"]["features"] == ["cuda80"]
    assert featured.meta["requirements"]["run_constrained"] == ["cpuonly <0a0", "cuda90 <0a0", "cuda100 <0a0"]
    assert "features" not in recipe.render(torch_plan("win-64", "9.0", "3.6", "1.0.0"), tmp_path / "d").meta["build"]
    assert "features" not in recipe.render(torch_plan("win-64", "cpu", "3.11", "2.5.1"), tmp_path / "m").meta["build"]


def test_renamed_packages_keep_everything_but_the_name_and_the_pin() -> None:
    meta = {"package": {"name": "torchvision", "version": "0.2.2.post3"}, "build": {"string": "py3.6_cpu_0"},
            "requirements": {"run": ["python >=3.6,<3.7.0a0", "pytorch ==1.0.0 py3.6_cpu_0", "six"]}}  # fmt: skip
    depends = era.alias_depends(meta["requirements"]["run"], "pytorch ==1.0.0 py3.6_cpu_0", "pytorch-cpu")
    assert depends == ["python >=3.6,<3.7.0a0", "pytorch-cpu ==1.0.0 py3.6_cpu_0", "six"]
    renamed = era.renamed(meta, "torchvision-cpu", depends)
    assert renamed["package"] == {"name": "torchvision-cpu", "version": "0.2.2.post3"}
    assert renamed["build"] == meta["build"] and renamed["requirements"]["run"] == depends
    assert meta["package"]["name"] == "torchvision"  # the original is left as it was
    assert era.index_fields(torch_plan("win-64", "8.0", "3.6", "1.0.0")) == {"features": "cuda80"}
    assert era.index_fields(torch_plan("win-64", "9.0", "3.6", "1.0.0")) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cpu": {}}, "torchbuild/data/era_names.yaml must be a mapping with a non-empty 'source'"),
        ({"source": "x", "cpu": {"torch": ">=0.3"}}, "torchbuild/data/era_names.yaml: missing or malformed field"),
        (
            {"source": "x", "cpu": {"torch": "0.3 to 1.1", "package": "p"}, "selectors": [],
             "selector_package": {"version": "1.0", "build": "0", "timestamp": 0}, "featured_build_number_offset": -1},
            "cpu.torch '0.3 to 1.1' is not a version specifier",
        ),
    ],
)  # fmt: skip
def test_bad_data_is_refused_naming_the_file(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as refused:
        era_names.parse(raw)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("cell", "line"),
    [
        (("win-64", "8.0", "1.0.0"), "2018 names                        cuda80-1.0-0 (track_features cuda80); "
                                     "this build has features cuda80"),
        (("win-64", "cpu", "1.0.1"), "pytorch-cpu (this package renamed); torchvision-cpu (its torchvision)"),
        (("linux-64", "cpu", "1.0.1"), "2018 names                       pytorch-cpu (this package renamed)\n"),
    ],
)  # fmt: skip
def test_the_plan_command_names_them(cell: tuple[str, str, str], line: str) -> None:
    platform, cuda, torch = cell
    result = pipeline("plan", "--platform", platform, "--cuda", cuda, "--py", "3.6", "--torch", torch)
    assert result.returncode == 0, result.stderr
    assert line in result.stdout
    modern = pipeline("plan", "--platform", "win-64", "--cuda", "cpu", "--py", "3.11", "--torch", "2.5.1")
    assert "2018 names" not in modern.stdout
