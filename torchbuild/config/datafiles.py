"""The one reader of ``torchbuild/data/*.yaml``. Each table is read once and parsed once into its typed form by the
parser its module gives (``table(name, parse)``); no other module opens the data files.

Parsing the YAML is a tenth of a run with nothing to do (companions.yaml and cuda_wheels.yaml, 330 kB), so what it
parses to is kept as JSON in the user's cache, named by the sha256 of the file's text: an edited file is parsed
again, and a parse JSON would not give back equal (a key that is not a string) is not kept."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from torchbuild.config.options import DEFAULT_CACHE_DIR
from torchbuild.errors import UserError

T = TypeVar("T")
# libyaml's loader where PyYAML was built with it (the wheels are): the same safe subset, ten times faster.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
PACKAGE = "torchbuild.data"
PARSED = DEFAULT_CACHE_DIR / "data-parsed"


@functools.cache
def raw(name: str) -> Any:
    """The parsed YAML of ``torchbuild/data/<name>``."""
    try:
        text = resources.files(PACKAGE).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"torchbuild/data/{name} is missing from this installation of torchbuild.") from None
    return parse(text, name)


def parse(text: str, name: str) -> Any:
    """``text`` (torchbuild/data/``name``) parsed: the JSON kept for this text, else the YAML parsed and kept."""
    kept = PARSED / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        return json.loads(kept.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        parsed = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"torchbuild/data/{name} is not valid YAML: {exc}") from None
    _keep(kept, parsed)
    return parsed


def _keep(path: Path, parsed: Any) -> None:
    """``parsed`` as JSON at ``path`` where JSON gives it back equal; nothing where the cache cannot be written."""
    try:
        text = json.dumps(parsed)
        if json.loads(text) != parsed:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        staged.write_text(text, encoding="utf-8")
        os.replace(staged, path)
    except (OSError, TypeError, ValueError):
        return


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
