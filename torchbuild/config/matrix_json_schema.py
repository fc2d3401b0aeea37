"""matrix.yaml's JSON schema, for editors (yaml-language-server: the ``$schema`` line at the top of matrix.yaml):
written from the typed shape in config/matrix_schema.py, never by hand. torchbuild/data/matrix.schema.json is its
output (tests/unit/test_matrix_schema.py checks it is up to date); after changing a key, write it again with

    python -m torchbuild.config.matrix_json_schema > torchbuild/data/matrix.schema.json

The pipeline does not read the schema: config/matrix.py validates with the same tables and its own messages. A
single value may be written as a number (``cuda: [cpu, 12.6]``, ``msvc_toolset: 14.29``): the matrix is read as
text, so 12.10 stays 12.10."""

from __future__ import annotations

import json
import types
from dataclasses import fields, is_dataclass
from typing import Any, Union, get_args, get_origin

from torchbuild.config.matrix_schema import (
    EXAMPLES,
    FLOAT_RANGES,
    MAX_INT,
    MAX_JOBS,
    MIN_INT,
    MatrixKeys,
    required,
    without_none,
)
from torchbuild.config.option_fields import literal_choices, type_of

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SINGLE_VALUE = {"type": ["string", "number"]}
# The keys whose values the types alone do not bound: "auto" or a count of jobs (quoted or not).
REFINED: dict[str, dict[str, Any]] = {
    "max_jobs": {
        "anyOf": [
            {"const": "auto"},
            {"type": "integer", "minimum": 1, "maximum": MAX_JOBS},
            {"type": "string", "pattern": "^[0-9]+$"},
        ]
    },
}


def json_schema() -> dict[str, Any]:
    """matrix.yaml's JSON schema (draft 2020-12)."""
    return {
        "$schema": DIALECT,
        "title": "torchbuild matrix.yaml",
        "description": "What the nightly builds: every platform x CUDA x Python, minus exclude, plus include "
        "(docs/matrix.md).",
        **_mapping(MatrixKeys, top_level=True),
    }


def _mapping(cls: type, *, top_level: bool = False, described: bool = True) -> dict[str, Any]:
    """``described``: each key with an example (not in an entry: the examples show the top-level keys)."""
    values = {f.name: _value(f.name, type_of(cls, f.name)) for f in fields(cls)}
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {key: _described(key, value) if described else value for key, value in values.items()},
        "additionalProperties": False,
    }
    needed = () if top_level else required(cls)  # MatrixKeys is never built: each of its keys is optional
    if needed:
        schema["required"] = list(needed)
    return schema


def _described(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "description": f"e.g. {EXAMPLES[key]}"} if key in EXAMPLES else schema


def _value(key: str, hint: Any) -> dict[str, Any]:
    hint = without_none(hint)
    if key in REFINED:
        return REFINED[key]
    if choices := literal_choices(hint):
        return {"enum": list(choices)}
    if get_origin(hint) in (Union, types.UnionType):
        return {"anyOf": [_value(key, arm) for arm in get_args(hint)]}
    if get_origin(hint) is dict:  # packages as a mapping: name -> its release, a checkout, or null (paired)
        arms = get_args(get_args(hint)[1])
        values = [{"type": "null"}] * (type(None) in arms) + [_value(key, arm) for arm in arms if arm is not type(None)]
        return {"type": "object", "additionalProperties": {"anyOf": values}, "minProperties": 1}
    if get_origin(hint) is tuple:
        item = get_args(hint)[0]
        if isinstance(item, type) and is_dataclass(item):
            # exclude / include: may be empty or null; an empty entry would match every cell
            return {"type": ["array", "null"], "items": {**_mapping(item, described=False), "minProperties": 1}}
        return {"type": "array", "items": _value(key, item), "minItems": 1, "uniqueItems": True}
    if isinstance(hint, type) and is_dataclass(hint):
        return _mapping(hint)
    if hint is int:
        return {"type": "integer", "minimum": MIN_INT.get(key, 0), "maximum": MAX_INT}
    if hint is float:
        low, high = FLOAT_RANGES[key]
        return {"type": "number", "exclusiveMinimum": low, "maximum": high}
    return SINGLE_VALUE


def text() -> str:
    """The schema as torchbuild/data/matrix.schema.json holds it."""
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    print(text(), end="")
