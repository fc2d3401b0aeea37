"""toolchains.yaml `provision` (parsed as part of that table by knowledge/compat.py): the CUDA toolkits the package
index can serve as wheels (platforms/provision.py makes a toolkit root of them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolkitRecipe:
    """toolchains.yaml `provision`: the wheels whose common folder ``root`` is a CUDA toolkit, for one CUDA major."""

    root: str
    packages: tuple[str, ...]
    optional: tuple[str, ...]


@dataclass(frozen=True)
class Provisioning:
    """toolchains.yaml `provision`: CUDA toolkits the package index can serve (platforms/provision.py)."""

    recipes: Mapping[str, ToolkitRecipe]  # by CUDA major
    platform_tags: Mapping[str, tuple[str, ...]]  # by conda subdir
    not_provisionable: str  # the fix for a CUDA the index cannot serve, with {cuda}, {dash}, {underscore}


def provisioning_of(raw: Mapping[str, Any]) -> Provisioning:
    return Provisioning(
        recipes={
            str(major): ToolkitRecipe(
                root=str(row["root"]),
                packages=tuple(str(p) for p in row["packages"]),
                optional=tuple(str(p) for p in row.get("optional") or ()),
            )
            for major, row in raw["cuda"].items()
        },
        platform_tags={str(k): tuple(str(t) for t in v) for k, v in raw["platform_tags"].items()},
        not_provisionable=str(raw["not_provisionable"]),
    )
