"""The one reader of ``torchbuild/data/*.yaml``. Each table is read once and parsed once into its typed form by the
parser its module gives (``table(name, parse)``); no other module opens the data files.

Where the environment variable ``TORCHBUILD_DATA`` names a folder, a file of that folder stands in for the
installed file of the same name (a companions.yaml with one more package: a user's extension, a test's fixture
package); the others are read from the installation. It is read at each call, not at import.

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

from torchbuild.errors import UserError
from torchbuild.knowledge.cache_folder import user_cache_dir

T = TypeVar("T")
# libyaml's loader where PyYAML was built with it (the wheels are): the same safe subset, ten times faster.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
PACKAGE = "torchbuild.data"
STAND_INS = "TORCHBUILD_DATA"  # a folder whose files stand in for the installed data files of the same name


def _stand_in(name: str) -> Path | None:
    """The file standing in for ``torchbuild/data/<name>`` (``TORCHBUILD_DATA``), or None."""
    folder = os.environ.get(STAND_INS)
    if not folder:
        return None
    if not Path(folder).is_dir():
        raise UserError(f"{STAND_INS}={folder} is not a folder: set it to a folder of data files that stand in for "
                        "torchbuild/data's (companions.yaml, ...), or unset it")  # fmt: skip
    path = Path(folder) / name
    return path if path.is_file() else None


def raw(name: str) -> Any:
    """The parsed YAML of ``torchbuild/data/<name>`` (or of the file standing in for it)."""
    return _raw(name, _stand_in(name))


@functools.cache
def _raw(name: str, stand_in: Path | None) -> Any:
    where = str(stand_in) if stand_in else f"torchbuild/data/{name}"
    try:
        if stand_in:
            text = stand_in.read_text(encoding="utf-8")
        else:
            text = resources.files(PACKAGE).joinpath(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"torchbuild/data/{name} is missing from this installation of torchbuild.") from None
    return parse(text, where)


def parse(text: str, where: str) -> Any:
    """``text`` (of the data file ``where``) parsed: the JSON kept for this text, else the YAML parsed and kept."""
    kept = user_cache_dir() / "data-parsed" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        digest, _, body = kept.read_text(encoding="utf-8").partition("\n")
        if digest == hashlib.sha256(body.encode()).hexdigest():  # a damaged entry is parsed again, and replaced
            return json.loads(body)
    except (OSError, ValueError):
        pass
    try:
        parsed = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise UserError(f"{where} is not valid YAML: {exc}") from None
    _keep(kept, parsed)
    return parsed


def _keep(path: Path, parsed: Any) -> None:
    """``parsed`` as JSON at ``path`` where JSON gives it back equal; nothing where the cache cannot be written."""
    try:
        body = json.dumps(parsed)
        if json.loads(body) != parsed:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.{os.getpid()}")
        staged.write_text(f"{hashlib.sha256(body.encode()).hexdigest()}\n{body}", encoding="utf-8")
        os.replace(staged, path)
    except (OSError, TypeError, ValueError):
        return


@functools.cache
def _parsed(name: str, stand_in: Path | None, parse: Callable[[Any], Any]) -> Any:
    return parse(_raw(name, stand_in))


def directory(name: str) -> Path | None:
    """The folder ``torchbuild/data/<name>`` of this installation (real repodata stored with the package), or None."""
    found = resources.files(PACKAGE).joinpath(name)
    return Path(str(found)) if found.is_dir() else None


def file(name: str) -> Path:
    """The file ``torchbuild/data/<name>`` of this installation, for a reader that takes a path (the built-in
    matrix.yaml)."""
    return Path(str(resources.files(PACKAGE).joinpath(name)))


def table(name: str, parse: Callable[[Any], T]) -> T:
    """``parse`` applied to ``torchbuild/data/<name>`` (or the file standing in for it), once per process."""
    result: T = _parsed(name, _stand_in(name), parse)
    return result
