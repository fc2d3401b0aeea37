"""Assembling a conda package from a staged prefix with py-rattler-build's ``assemble_package`` (the one wrapper of
that tool): archive type, compression, and index.json/about.json from the rendered recipe.

The assembly runs in a child process (``python -m torchbuild.conda.assembly``): py-rattler-build holds the GIL for
the whole assembly (tens of seconds for torch), which would stop the stages running beside it and keep this process
from answering a signal; a child leaves both free, and an interrupted run ends it (host/signals.py). It writes the
package under its final name as it goes, so it is given a folder of its own beside the output (``.assembling-*``)
and the finished package is renamed into place: a run killed in the middle never leaves half a package under the
name of a whole one (the next assembly removes the folder)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.conda.rattler_child import child_env
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, one_of
from torchbuild.host import signals

ARCHIVE_SUFFIX = {"conda": ".conda", "tar.bz2": ".tar.bz2"}
# Levels each archive type accepts: zstd for .conda (rattler passes the level through), bzip2 for .tar.bz2.
COMPRESSION_LEVELS = {"conda": range(1, 23), "tar.bz2": range(1, 10)}
COMPRESSORS = {"conda": "zstd", "tar.bz2": "bzip2"}
ASSEMBLING = ".assembling-"


def build_timestamp(epoch: int) -> datetime.datetime:
    """The package's timestamp: the cell's epoch (provenance.py), never the clock."""
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)


def check_options(options: RunOptions) -> None:
    levels = COMPRESSION_LEVELS.get(options.conda_format)
    if levels is None:
        raise UserError(f"conda format '{options.conda_format}' is not known; valid: {one_of(ARCHIVE_SUFFIX)}.")
    if options.compression_level not in levels:
        raise UserError(
            f"compression level {options.compression_level} is out of range for {options.conda_format}: "
            f"valid: {levels.start} to {levels.stop - 1}."
        )
    if options.compression_threads < 1:
        raise UserError(f"compression threads must be 1 or more (got {options.compression_threads}).")


def _specs(meta: Mapping[str, Any], *keys: str) -> list[str]:
    node: Any = meta
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return [str(s) for s in node or ()]


def assemble(
    meta: Mapping[str, Any],
    *,
    subdir: str,
    payload_dir: Path,
    out_dir: Path,
    options: RunOptions,
    recipe_dir: Path | None = None,
    licenses: Sequence[Path] = (),
    info_files: Sequence[Path] = (),
    timestamp: datetime.datetime | None = None,
) -> Path:
    """Assemble the staged prefix ``payload_dir`` into a package in ``out_dir``; return its path.

    Everything in index.json and about.json comes from the rendered recipe ``meta`` (selectors applied);
    ``info_files`` go into ``info/`` as they are named.
    """
    check_options(options)
    about = meta.get("about") or {}
    try:
        arguments = {
            "name": str(meta["package"]["name"]),
            "version": str(meta["package"]["version"]),
            "target_platform": subdir,
            "build_string": str(meta["build"]["string"]),
            "build_number": int(meta["build"]["number"]),
            # Every file, hidden ones too (collect_files in the child): files_dir leaves out names starting with a
            # dot, such as delvewheel's torch.libs/.load-order-<dist> (the DLL load order for Pythons before 3.8),
            # which RECORD lists.
            "payload_dir": str(payload_dir),
            "depends": _specs(meta, "requirements", "run"),
            "constrains": _specs(meta, "requirements", "run_constrained"),
            "homepage": about.get("home"),
            "license": about.get("license"),
            "license_family": about.get("license_family"),
            "summary": about.get("summary"),
            "description": about.get("description"),
            "license_files": [str(p) for p in licenses] or None,
            "test_files": [str(p) for p in info_files] or None,  # rattler-build puts these into info/
            "recipe_dir": str(recipe_dir) if recipe_dir else None,
            "compression_level": options.compression_level,
            "compression_threads": options.compression_threads,
            "archive_type": options.conda_format,
            "timestamp": timestamp.timestamp() if timestamp else None,
            # A wheel holds no build prefix to replace at install time (it is relocatable by construction), and
            # scanning a 1 GB payload for one costs time for nothing.
            "detect_prefix": False,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"the rendered recipe in {recipe_dir} lacks a package field: {exc}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    for earlier in out_dir.glob(ASSEMBLING + "*"):
        shutil.rmtree(earlier, ignore_errors=True)  # a killed run's
    assembling = Path(tempfile.mkdtemp(prefix=ASSEMBLING, dir=out_dir))
    try:
        made = _in_child({**arguments, "output_dir": str(assembling)}, out_dir)
        final = out_dir / made.name
        os.replace(made, final)
    finally:
        shutil.rmtree(assembling, ignore_errors=True)
    return final


def _in_child(arguments: Mapping[str, Any], out_dir: Path) -> Path:
    """py-rattler-build's assemble_package with ``arguments`` in a child process; the package it made."""
    command = [sys.executable, "-m", "torchbuild.conda.assembly"]
    with signals.child(signals.start(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace", env=child_env())) as proc:  # fmt: skip
        stdout, stderr = proc.communicate(json.dumps(arguments))
    answers = [line for line in stdout.splitlines() if line.startswith("{")]
    answer = json.loads(answers[-1]) if answers else {"error": f"ended without an answer (exit {proc.returncode}): "
                                                               f"{stderr.strip()[-2000:]}"}  # fmt: skip
    if "error" in answer:
        raise UserError(f"assembling the package in {out_dir} failed: {answer['error']}")
    return Path(answer["path"])


def _child() -> None:
    from rattler_build import ArchiveType, assemble_package, collect_files

    arguments = json.loads(sys.stdin.read())
    arguments["files"] = collect_files(Path(arguments.pop("payload_dir")), include_hidden=True)
    arguments["archive_type"] = ArchiveType.TarBz2 if arguments["archive_type"] == "tar.bz2" else ArchiveType.Conda
    if arguments["timestamp"] is not None:
        arguments["timestamp"] = datetime.datetime.fromtimestamp(arguments["timestamp"], tz=datetime.timezone.utc)
    for key in ("output_dir", "recipe_dir"):
        arguments[key] = Path(arguments[key]) if arguments[key] else None
    try:
        answer = {"path": str(assemble_package(**arguments).path)}
    except BaseException as exc:  # RattlerBuildError, and a panic of its Rust code (PanicException)
        answer = {"error": str(exc).strip() or type(exc).__name__}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _child()
