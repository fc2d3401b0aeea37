"""Assembling a conda package from a staged prefix with py-rattler-build's ``assemble_package`` (the one wrapper of
that tool): archive type, compression, and index.json/about.json from the rendered recipe.

py-rattler-build writes the package under its final name as it goes; it is given a folder of its own beside the
output (``.assembling-*``) and the finished package is renamed into place, so that a run killed in the middle never
leaves half a package under the name of a whole one (the next assembly removes the folder)."""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, one_of

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
    from rattler_build import ArchiveType, RattlerBuildError, assemble_package

    check_options(options)
    about = meta.get("about") or {}
    archive = ArchiveType.TarBz2 if options.conda_format == "tar.bz2" else ArchiveType.Conda
    out_dir.mkdir(parents=True, exist_ok=True)
    for earlier in out_dir.glob(ASSEMBLING + "*"):
        shutil.rmtree(earlier, ignore_errors=True)  # a killed run's
    assembling = Path(tempfile.mkdtemp(prefix=ASSEMBLING, dir=out_dir))
    try:
        output = assemble_package(
            name=str(meta["package"]["name"]),
            version=str(meta["package"]["version"]),
            target_platform=subdir,
            build_string=str(meta["build"]["string"]),
            build_number=int(meta["build"]["number"]),
            output_dir=assembling,
            files_dir=payload_dir,
            depends=_specs(meta, "requirements", "run"),
            constrains=_specs(meta, "requirements", "run_constrained"),
            homepage=about.get("home"),
            license=about.get("license"),
            license_family=about.get("license_family"),
            summary=about.get("summary"),
            description=about.get("description"),
            license_files=[str(p) for p in licenses] or None,
            test_files=[str(p) for p in info_files] or None,  # rattler-build puts these into info/
            recipe_dir=recipe_dir,
            compression_level=options.compression_level,
            compression_threads=options.compression_threads,
            archive_type=archive,
            timestamp=timestamp,
            # A wheel holds no build prefix to replace at install time (it is relocatable by construction), and
            # scanning a 1 GB payload for one costs time for nothing.
            detect_prefix=False,
        )
        made = Path(output.path)
        final = out_dir / made.name
        os.replace(made, final)
    except RattlerBuildError as exc:
        raise UserError(f"assembling the package in {out_dir} failed: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"the rendered recipe in {recipe_dir} lacks a package field: {exc}") from None
    finally:
        shutil.rmtree(assembling, ignore_errors=True)
    return final
