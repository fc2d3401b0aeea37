"""matrix.yaml's shape is written once (config/matrix_schema.py's dataclasses): the loader's tables and the JSON
schema editors use (torchbuild/data/matrix.schema.json) derive from it, so they agree on every key."""

from __future__ import annotations

import json
import re
from dataclasses import fields

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT
from torchbuild.config import matrix, matrix_json_schema
from torchbuild.config.matrix import MatrixError
from torchbuild.config.matrix_schema import INCLUDE_KEYS, TOP_LEVEL, MatrixKeys
from torchbuild.config.options import RunOptions
from torchbuild.run.flow import pipeline

SHIPPED = ROOT / "torchbuild" / "data" / "matrix.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SHIPPED.read_text(encoding="utf-8")))

# Matrices the loader takes (each key, the edges of the ranges, numbers where text is meant).
GOOD = [
    "cuda: [12.10, 9.0]\npython: [3.10]\nplatforms: [linux-64]\n",
    'exclude:\n  - {platform: linux-64, cuda: "12.4"}\ninclude:\n  - {platform: win-64, cuda: "9.0", python: "3.6", '
    'torch: "1.1.0", declared_libraries: vendor, test_command: pytest, test_requires: [pytest]}\n',
    "exclude:\ninclude: []\n",
    "build_number: 2147483647\nbuild: {timeout_hours: 744, max_jobs: 4096}\n",
    "build: {max_jobs: auto, compiler_cache: none, generator: visual-studio, msvc_toolset: 14.29, "
    "conda_builder: conda-build}\n",
    "torch: {git_ref: main, git_url: https://github.com/pytorch/pytorch, build_version: nightly}\n",
    "torch: 2.5.1\nchannel: s3://bucket/prefix\npackages: [torch, torchvision==0.20.1]\nkeep_nightlies: 1\n",
    "declared_libraries: keep\ntest_command: pytest {project}/tests\ntest_requires: [pytest, numpy]\n",
    "packages:\n  torchvision: {git_ref: v0.28.0, git_url: https://github.com/pytorch/vision}\n  torchaudio:\n",
    "packages: {torchvision: {source_dir: src/vision, build_version: 0.28.0a0+mine}, torchaudio: 2.11.0}\n",
]
# Matrices the loader refuses for a key, a type, a choice or a range: the schema refuses them too.
BAD = [
    "pyton: ['3.11']\n",
    "build:\n  max_job: 4\n",
    "exclude:\n  - {cuad: '9.0'}\n",
    "exclude:\n  - {}\n",
    "packages: {torchvision: {git_reff: main}}\n",
    "packages: {}\n",
    "cuda: []\n",
    "python: 3.11\n",
    "build_number: two\n",
    "build_number: -1\n",
    "keep_nightlies: 0\n",
    "torch: [1, 2]\n",
    "torch: {build_version: nightly}\n",
    "build:\n  generator: make\n",
    "include:\n  - {cuda: '9.0'}\n",
    "cuda: [cpu, cpu]\n",
    "platforms: [linux-64, osx-arm64]\n",
    "exclude:\n  - {platform: linux64}\n",
    "declared_libraries: all\n",
    "build:\n  timeout_hours: 0\n",
    "build:\n  timeout_hours: .inf\n",
    "build:\n  max_jobs: 0\n",
    "build:\n  max_jobs: 99999999999\n",
    "build:\n  max_jobs: many\n",
]


def _errors(text: str) -> list[str]:
    return [error.message for error in VALIDATOR.iter_errors(yaml.safe_load(text))]


def test_the_shipped_schema_is_the_one_the_dataclasses_write() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SHIPPED.read_text(encoding="utf-8")))
    assert SHIPPED.read_text(encoding="utf-8") == matrix_json_schema.text(), (
        "torchbuild/data/matrix.schema.json is out of date: "
        "python -m torchbuild.config.matrix_json_schema > torchbuild/data/matrix.schema.json"
    )


@pytest.mark.parametrize("path", ["matrix.yaml", "torchbuild/data/matrix.yaml", "docs/matrix.md"])
def test_the_project_s_matrices_are_valid_under_the_schema(path: str) -> None:
    text = (ROOT / path).read_text(encoding="utf-8")
    found = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL) if path.endswith(".md") else [text]
    assert found
    for each in found:
        matrix.parse(each)
        assert _errors(each) == []


def test_the_matrix_names_the_schema_for_editors() -> None:
    first = (ROOT / "matrix.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=torchbuild/data/matrix.schema.json"


@pytest.mark.parametrize("text", GOOD)
def test_a_matrix_the_loader_takes_the_schema_takes(text: str) -> None:
    matrix.parse(text)
    assert _errors(text) == []


@pytest.mark.parametrize("text", BAD)
def test_a_matrix_the_loader_refuses_the_schema_refuses(text: str) -> None:
    with pytest.raises(MatrixError):
        matrix.parse(text)
    assert _errors(text) != []


def test_the_loader_s_keys_are_the_dataclass_fields_in_their_order() -> None:
    assert list(TOP_LEVEL) == [f.name for f in fields(MatrixKeys)]
    assert TOP_LEVEL == {
        "torch": "torch", "platforms": "list", "cuda": "list", "python": "list", "exclude": "rules",
        "include": "rules", "channel": "str", "build_number": "int", "build": "build", "packages": "packages",
        "declared_libraries": "choice", "keep_nightlies": "int", "test_command": "test", "test_requires": "test",
    }  # fmt: skip
    with pytest.raises(MatrixError) as info:
        matrix.parse("include:\n  - {platform: win-64, cuda: cpu, python: '3.11', cuad: x}\n")
    assert str(info.value).endswith(
        "Valid keys: platform, cuda, python, torch, declared_libraries, test_command or test_requires."
    )
    assert tuple(VALIDATOR.schema["properties"]["include"]["items"]["properties"]) == INCLUDE_KEYS


def test_every_option_a_stage_is_shaped_by_is_a_run_option() -> None:
    names = {f.name for f in fields(RunOptions)}
    shaping = {stage.name: [n for n in stage.shaped_by if n not in names] for stage in pipeline()}
    assert {stage: wrong for stage, wrong in shaping.items() if wrong} == {}
    assert any(stage.shaped_by for stage in pipeline())
