"""The pin step's question to the package indexes ("which release's wheel of this build do you offer for this
target?"), answered again from a record while nothing it depends on has changed, so that a rerun asks no resolver.

The resolver reuses an index's answer for as long as the index allows (PyPI's pages: ``Cache-Control:
max-age=600``); the record is kept no longer (MAX_AGE_S). It is also dropped when anything the answer depends on
has changed: the PIP_* environment, the interpreter, any configuration file pip looks for (present or not,
host/pip_config.py), the constraints files, and local find-links and file:// index directories (a wheel added
there changes the directory). ``--force`` always asks, and records the answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from torchbuild.config import nesting
from torchbuild.host import locks
from torchbuild.host.files import changed_at, write_atomic

MAX_AGE_S = 600.0
LOCATION_SETTINGS = ("find-links", "index-url", "extra-index-url")


def _stat(path: str) -> list[int]:
    try:
        return [os.stat(path).st_size, changed_at(Path(path))]
    except OSError:
        return [-1, -1]


def local_directories(locations: Sequence[str], project: str) -> list[str]:
    """The directories on this machine among pip's index and find-links locations (a file:// URL or a path), with
    the project's folder of a file:// simple index."""
    found: list[str] = []
    for location in locations:
        parsed = urllib.parse.urlparse(location)
        if parsed.scheme in ("http", "https"):
            continue
        path = urllib.parse.unquote(parsed.path) if parsed.scheme == "file" else location
        found += [path, os.path.join(path, project)]
    return found


def _environment() -> dict[str, str]:
    names = ("HOME", "VIRTUAL_ENV", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "APPDATA", "PROGRAMDATA")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("PIP_") or k in names}


def _depends_on(target: Sequence[str], paths: Sequence[str]) -> dict[str, object]:
    return {
        "target": list(target),
        "python": sys.executable,
        "environment": _environment(),
        "files": {p: _stat(p) for p in sorted(set(paths))},
    }


def _key(target: Sequence[str]) -> str:
    """Where the answer for ``target`` asked from this interpreter with these settings is kept: runs with other
    settings sharing the record (a CI job, a person's shell, tests beside a build) keep an answer each."""
    return json.dumps({"target": list(target), "python": sys.executable, "environment": _environment()})


def recall(record: Path, target: Sequence[str]) -> list[Version] | None:
    """The recorded answer for ``target``, if it is young enough and nothing it depends on has changed."""
    try:
        raw = nesting.loads(record.read_text(encoding="utf-8"))
        entry = raw[_key(target)]
        fresh = 0 <= time.time() - float(entry["at"]) < MAX_AGE_S
        if not fresh or entry["depends_on"] != _depends_on(target, list(entry["depends_on"]["files"])):
            return None
        return [Version(v) for v in entry["versions"]]
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion):
        return None


def _young(at: object, now: float) -> bool:
    return isinstance(at, (int, float)) and now - at < MAX_AGE_S


def remember(record: Path, target: Sequence[str], versions: Sequence[Version], paths: Sequence[str]) -> None:
    """Add the answer for ``target`` to the record, and drop the answers too old to be used. Runs on one machine
    share it (the user's cache): the read and the write are one step under its lock, so that no run's answer is
    lost to another's write. Where the lock stays held, the answer is not recorded (the next run asks again)."""
    entry = {"at": time.time(), "versions": [str(v) for v in versions], "depends_on": _depends_on(target, paths)}
    record.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(locks.Busy), locks.held(record.with_name(record.name + ".lock"), busy="", wait_s=30):
        try:
            raw = nesting.loads(record.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raw = {}
        except (OSError, ValueError):
            raw = {}
        raw = {k: v for k, v in raw.items() if isinstance(v, dict) and _young(v.get("at"), time.time())}
        raw[_key(target)] = entry
        write_atomic(record, json.dumps(raw, indent=1) + "\n")


def offered(
    record: Path | None,
    target: Sequence[str],
    ask: Callable[[], tuple[list[Version], list[str]]],
    fresh: bool = False,
) -> list[Version]:
    """``ask()`` (the versions, and the paths the answer depended on), or the recorded answer where it holds;
    ``fresh``: ask in any case (and record the answer)."""
    if record is not None and not fresh and (known := recall(record, target)) is not None:
        return known
    versions, paths = ask()
    if record is not None:
        remember(record, target, versions, paths)
    return versions
