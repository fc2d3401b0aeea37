"""The one reader of ``torchbuild/data/*.yaml``. Each table is read once and parsed once into its typed form by the
parser its module gives (``table(name, parse)``); no other module opens the data files."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from torchbuild.errors import UserError

T = TypeVar("T")
# libyaml's loader where PyYAML was built with it (the wheels are): the same safe subset, ten times faster.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
PACKAGE = "torchbuild.data"


@functools.cache
def raw(name: str) -> Any:
    """The parsed YAML of ``torchbuild/data/<name>``."""
    try:
        text = resources.files(PACKAGE).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"torchbuild/data/{name} is missing from this installation of torchbuild.") from None
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"torchbuild/data/{name} is not valid YAML: {exc}") from None


@functools.cache
def _parsed(name: str, parse: Callable[[Any], Any]) -> Any:
    return parse(raw(name))


def directory(name: str) -> Path | None:
    """The folder ``torchbuild/data/<name>`` of this installation (real repodata stored with the package), or None."""
    found = resources.files(PACKAGE).joinpath(name)
    return Path(str(found)) if found.is_dir() else None


def file(name: str) -> Path:
    """The file ``torchbuild/data/<name>`` of this installation, for a reader that takes a path (the built-in
    matrix.yaml)."""
    return Path(str(resources.files(PACKAGE).joinpath(name)))


def table(name: str, parse: Callable[[Any], T]) -> T:
    """``parse`` applied to ``torchbuild/data/<name>``, once per process."""
    result: T = _parsed(name, parse)
    return result
