"""conda: the repaired wheel becomes the cell's conda package (.conda, or .tar.bz2 when asked).

The package is made from the same wheel as the pip artifact, never from a second compile: the wheel is unpacked
into the Plan's site-packages of a staging prefix, its Requires-Dist become conda run dependencies, and the
package is assembled with py-rattler-build's ``assemble_package`` from the rendered recipe (``recipes/pytorch``),
which also goes into ``info/recipe``.
"""

from __future__ import annotations

import base64
import configparser
import csv
import datetime
import functools
import hashlib
import io
import os
import re
import shutil
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchbuild import recipe, wheelfile
from torchbuild.compat import Rule
from torchbuild.console import console
from torchbuild.errors import StageFailed, UserError, one_of
from torchbuild.plan import Plan
from torchbuild.stages import Artifact, Context, RunOptions, StageResult

STAGE = "conda"
MAPPING_FILE = "pypi_to_conda.yaml"
ARCHIVE_SUFFIX = {"conda": ".conda", "tar.bz2": ".tar.bz2"}
# Levels each archive type accepts: zstd for .conda (rattler passes the level through), bzip2 for .tar.bz2.
COMPRESSION_LEVELS = {"conda": range(1, 23), "tar.bz2": range(1, 10)}
OPERATOR_ORDER = {op: i for i, op in enumerate(("===", "==", "~=", ">=", ">", "!=", "<=", "<"))}  # lower bound first
LICENSE_NAMES = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)(\.[A-Za-z0-9]+)?$", re.IGNORECASE)
# A console script that finds the environment's python next to itself, so no prefix placeholder is needed: the
# shell runs line 2; Python sees lines 2-3 as a string. This is the form pip (distlib) writes for long shebangs.
UNIX_SCRIPT_HEAD = """#!/bin/sh
'''exec' "$(dirname -- "$(readlink -f -- "$0")")/python" "$0" "$@"
' '''
"""
ENTRY_POINT_BODY = """# -*- coding: utf-8 -*-
import re
import sys
from {module} import {name}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({call}())
"""


# --- the mapping data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameRule:
    conda: str
    keep_versions: bool = True


@dataclass(frozen=True)
class WheelToConda:
    """torchbuild/data/pypi_to_conda.yaml, typed."""

    names: Mapping[str, NameRule]
    marker_environments: Mapping[str, Mapping[str, str]]
    schemes: Mapping[str, Mapping[str, str]]

    def conda_name(self, pypi_name: str) -> NameRule:
        key = canonicalize_name(pypi_name)
        return self.names.get(key, NameRule(conda=key))


def _name_rule(key: str, value: Any) -> NameRule:
    if isinstance(value, str):
        return NameRule(conda=value)
    if isinstance(value, dict) and isinstance(value.get("conda"), str):
        versions = value.get("versions", "keep")
        if versions not in ("keep", "drop"):
            raise UserError(f"{MAPPING_FILE}: names.{key}.versions is '{versions}'; valid: keep or drop.")
        return NameRule(conda=value["conda"], keep_versions=versions == "keep")
    raise UserError(f"{MAPPING_FILE}: names.{key} must be a conda name or {{conda: NAME, versions: drop}}.")


@functools.cache
def load_mapping() -> WheelToConda:
    text = resources.files("torchbuild.data").joinpath(MAPPING_FILE).read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    names = {str(canonicalize_name(str(k))): _name_rule(str(k), v) for k, v in raw["names"].items()}
    envs = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["marker_environments"].items()}
    schemes = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["schemes"].items()}
    return WheelToConda(names=names, marker_environments=envs, schemes=schemes)


# --- reading the wheel -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelInfo:
    path: Path
    name: str  # the distribution name as in METADATA
    version: str
    dist_info: str  # e.g. torch-2.13.0+cpu.dist-info
    requires: tuple[str, ...]  # Requires-Dist, verbatim
    tags: tuple[str, ...]  # WHEEL's Tag lines
    entry_points: Mapping[str, Mapping[str, str]]  # group -> script name -> "module:attr"

    @property
    def data_dir(self) -> str:
        return self.dist_info.removesuffix(".dist-info") + ".data"


def open_wheel(path: Path, stage: str = STAGE) -> zipfile.ZipFile:
    try:
        return wheelfile.open_wheel(path)
    except wheelfile.WheelError as exc:
        raise StageFailed(stage, str(exc)) from None


def read_wheel(path: Path, stage: str = STAGE) -> WheelInfo:
    """What the conda stage needs of a wheel: its .dist-info, Requires-Dist, tags and entry points."""
    try:
        name = wheelfile.parse_name(path)
        with wheelfile.open_wheel(path) as zf:
            dist_info = wheelfile.dist_info_dir(zf, name)
            metadata = wheelfile.read_dist_info(zf, name, "METADATA")
            tags = wheelfile.wheel_file_tags(zf, name)
            entry_member = f"{dist_info}/entry_points.txt"
            entry_text = zf.read(entry_member).decode("utf-8") if entry_member in zf.namelist() else ""
    except wheelfile.WheelError as exc:
        raise StageFailed(stage, str(exc)) from None
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names are case-sensitive
    try:
        parser.read_string(entry_text)
    except configparser.Error as exc:
        raise StageFailed(stage, f"{path}: {dist_info}/entry_points.txt cannot be parsed: {exc}") from None
    return WheelInfo(
        path=path,
        name=str(metadata.get("Name", "")),
        version=str(metadata.get("Version", "")),
        dist_info=dist_info,
        requires=tuple(str(r) for r in metadata.get_all("Requires-Dist") or ()),
        tags=tuple(sorted(str(t) for t in tags)),
        entry_points={group: dict(parser.items(group)) for group in parser.sections()},
    )


# --- Requires-Dist -> conda specs ------------------------------------------------------------------------


def marker_environment(plan: Plan, mapping: WheelToConda | None = None) -> dict[str, str]:
    """PEP 508 marker values of the cell's target (not of this host)."""
    mapping = mapping or load_mapping()
    if plan.platform not in mapping.marker_environments:
        raise UserError(
            f"{MAPPING_FILE}: no marker environment for {plan.platform}; known: {one_of(mapping.marker_environments)}."
        )
    return {
        **mapping.marker_environments[plan.platform],
        "python_version": plan.python,
        "python_full_version": f"{plan.python}.0",
        "platform_release": "",
        "platform_version": "",
        "implementation_version": f"{plan.python}.0",
        "extra": "",  # extras are dropped: an `extra == "x"` requirement never applies to the package
    }


def conda_version_spec(specifier: SpecifierSet) -> str:
    """PEP 440 specifiers as a conda version spec: '>=1.13.3', '1.2.*', '>=1,<2'."""
    parts: list[str] = []
    for spec in sorted(specifier, key=lambda s: (OPERATOR_ORDER.get(s.operator, 9), s.version)):
        assert isinstance(spec, Specifier)
        if spec.operator == "===":
            parts.append(f"=={spec.version}")
        elif spec.operator == "==" and spec.version.endswith(".*"):
            parts.append(spec.version)
        else:
            parts.append(f"{spec.operator}{spec.version}")
    return ",".join(parts)


def requirement_to_conda(requirement: str, env: Mapping[str, str], mapping: WheelToConda) -> str | None:
    """One Requires-Dist line as a conda spec, or None when its marker excludes the cell's target."""
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate(dict(env)):
        return None
    if req.url:
        raise ValueError(f"'{requirement}' is a direct URL reference, which a conda dependency cannot express")
    rule = mapping.conda_name(req.name)
    version = conda_version_spec(req.specifier) if rule.keep_versions else ""
    return f"{rule.conda} {version}" if version else rule.conda


@functools.cache
def _override_rules() -> tuple[tuple[Rule, str], ...]:
    text = resources.files("torchbuild.data").joinpath("packaging.yaml").read_text(encoding="utf-8")
    rows = yaml.safe_load(text).get("requirement_overrides") or ()
    return tuple(
        (Rule(value=str(r["spec"]), when=r.get("when") or {}), str(canonicalize_name(str(r["pypi"])))) for r in rows
    )


def requirement_overrides(plan: Plan) -> dict[str, str]:
    """PyPI name -> the conda spec that replaces its converted pin for this cell (packaging.yaml)."""
    return {name: rule.value for rule, name in _override_rules() if rule.applies(plan.platform, plan.torch, plan.cuda)}


def wheel_requires(wheel: WheelInfo, plan: Plan, mapping: WheelToConda | None = None) -> tuple[str, ...]:
    """The wheel's Requires-Dist as conda specs for the cell's platform and Python, in the wheel's order."""
    mapping = mapping or load_mapping()
    env = marker_environment(plan, mapping)
    overrides = requirement_overrides(plan)
    specs: list[str] = []
    for line in wheel.requires:
        try:
            spec = requirement_to_conda(line, env, mapping)
        except (InvalidRequirement, UndefinedComparison, UndefinedEnvironmentName, ValueError) as exc:
            raise StageFailed(STAGE, f"{wheel.path}: Requires-Dist '{line}': {exc}") from None
        if spec is not None and (name := str(canonicalize_name(Requirement(line).name))) in overrides:
            spec = overrides[name]
        if spec is not None and spec not in specs:
            specs.append(spec)
    return tuple(specs)


# --- unpacking the wheel into a staging prefix -----------------------------------------------------------


@dataclass(frozen=True)
class Payload:
    root: Path  # the staging prefix: its files are the package's payload
    files: int
    size: int
    scripts: tuple[str, ...]  # console scripts written from entry points, relative to the prefix
    scripts_not_made: tuple[str, ...]  # entry points that got no script on this platform


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _scheme(plan: Plan, wheel: WheelInfo, mapping: WheelToConda) -> dict[str, str]:
    if plan.platform not in mapping.schemes:
        raise UserError(f"{MAPPING_FILE}: no install scheme for {plan.platform}; known: {one_of(mapping.schemes)}.")
    values = {"site_packages": plan.conda.site_packages, "python": plan.python, "dist": wheel.name}
    return {key: value.format(**values) for key, value in mapping.schemes[plan.platform].items()}


def _target(name: str, wheel: WheelInfo, scheme: Mapping[str, str]) -> PurePosixPath:
    """Where a wheel member goes, relative to the prefix (pip's rules: .data/<key>/ goes to the scheme's key)."""
    first, _, rest = name.partition("/")
    if first != wheel.data_dir:
        return PurePosixPath(scheme["platlib"], name)
    key, _, inner = rest.partition("/")
    if key not in scheme:
        raise StageFailed(STAGE, f"{wheel.path}: {name} is in {first}/{key}/; valid: {one_of(sorted(scheme))}")
    return PurePosixPath(scheme[key], inner) if scheme[key] else PurePosixPath(inner)


def _script_text(target: str) -> str:
    module, _, attr = target.partition(":")
    attr = attr.split("[", 1)[0].strip()  # "module:attr [extra]" is an old form; the extra does not matter here
    return UNIX_SCRIPT_HEAD + ENTRY_POINT_BODY.format(
        module=module.strip(), name=attr.split(".")[0], call=attr or module.strip()
    )


def _fix_shebang(path: Path, member: str) -> dict[str, list[str]]:
    """pip's rule for .data/scripts: a '#!python' first line means "the environment's python"."""
    data = path.read_bytes()
    if not data.startswith((b"#!python\n", b"#!python\r\n", b"#!pythonw\n", b"#!pythonw\r\n")):
        return {}
    data = UNIX_SCRIPT_HEAD.encode("utf-8") + data.split(b"\n", 1)[1]
    path.write_bytes(data)
    path.chmod(0o755)
    return {member: [_record_hash(data), str(len(data))]}


def unpack_wheel(wheel: WheelInfo, plan: Plan, dest: Path, mapping: WheelToConda | None = None) -> Payload:
    """Install ``wheel`` into the empty staging prefix ``dest`` the way pip would into a conda environment.

    Keeps the .dist-info (INSTALLER says "conda"; RECORD lists what is installed, relative to site-packages),
    moves .data/ parts to their scheme directories, and writes console scripts on platforms where a plain script
    runs (linux-64). Every member path is checked before anything is written.
    """
    mapping = mapping or load_mapping()
    scheme = _scheme(plan, wheel, mapping)
    site = PurePosixPath(plan.conda.site_packages)
    moved: dict[str, PurePosixPath] = {}
    rewritten: dict[str, list[str]] = {}  # member -> its new RECORD hash and size
    files = size = 0
    with open_wheel(wheel.path) as zf:
        members = [m for m in zf.infolist() if not m.is_dir()]
        bad = wheelfile.unsafe_members(zf)
        if bad:
            name, why = bad[0]
            raise StageFailed(STAGE, f"{wheel.path}: member {name!r} escapes the install root ({why}); not unpacked")
        for info in members:
            target = _target(info.filename, wheel, scheme)
            if info.filename.split("/", 1)[0] == wheel.data_dir:
                moved[info.filename] = target
            out = dest / target
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            out.chmod(0o755 if mode & 0o111 else 0o644)
            if target.parent == PurePosixPath(scheme["scripts"]) and not plan.platform.startswith("win-"):
                rewritten.update(_fix_shebang(out, info.filename))
            files += 1
            size += out.stat().st_size
        record_text = zf.read(f"{wheel.dist_info}/RECORD").decode("utf-8")

    rows = [row for row in csv.reader(io.StringIO(record_text)) if row]
    for row in rows:
        if row[0] in rewritten:
            row[1:] = rewritten[row[0]]
        if row[0] in moved:
            row[0] = os.path.relpath(moved[row[0]], site).replace(os.sep, "/")
    added: dict[PurePosixPath, bytes] = {PurePosixPath(site, wheel.dist_info, "INSTALLER"): b"conda\n"}
    scripts: list[str] = []
    not_made: list[str] = []
    for group in ("console_scripts", "gui_scripts"):
        for script, reference in sorted(wheel.entry_points.get(group, {}).items()):
            if plan.platform.startswith("win-") or ":" not in reference:
                # A Windows script needs a launcher .exe, which a wheel does not carry.
                not_made.append(script)
                continue
            path = PurePosixPath(scheme["scripts"], script)
            added[path] = _script_text(reference).encode("utf-8")
            scripts.append(str(path))
    for path, data in added.items():
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        out.chmod(0o755 if str(path) in scripts else 0o644)
        rel = os.path.relpath(path, site).replace(os.sep, "/")
        rows = [r for r in rows if r[0] != rel]
        rows.append([rel, _record_hash(data), str(len(data))])
        files += 1
        size += len(data)
    record_rel = f"{wheel.dist_info}/RECORD"
    rows = [r for r in rows if r[0] != record_rel] + [[record_rel, "", ""]]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    (dest / site / record_rel).write_text(buffer.getvalue(), encoding="utf-8")
    return Payload(root=dest, files=files, size=size, scripts=tuple(scripts), scripts_not_made=tuple(sorted(not_made)))


def license_files(wheel: WheelInfo, payload: Payload, plan: Plan) -> list[Path]:
    """The wheel's top-level license files (LICENSE, COPYING, NOTICE), for info/licenses."""
    dist_info = payload.root / plan.conda.site_packages / wheel.dist_info
    found: list[Path] = []
    for folder in (dist_info / "licenses", dist_info):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.is_file() and LICENSE_NAMES.match(p.name))
    return found


# --- assembling ------------------------------------------------------------------------------------------


def archive_filename(plan: Plan, conda_format: str) -> str:
    """The package's file name: the Plan's, with .tar.bz2 for that format."""
    if conda_format not in ARCHIVE_SUFFIX:
        raise UserError(f"conda format '{conda_format}' is not known; valid: {one_of(ARCHIVE_SUFFIX)}.")
    return plan.conda.filename.removesuffix(".conda") + ARCHIVE_SUFFIX[conda_format]


def build_timestamp() -> datetime.datetime:
    """The build timestamp: SOURCE_DATE_EPOCH when set (reproducible builds), else now."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        return datetime.datetime.now(tz=datetime.timezone.utc)
    try:
        return datetime.datetime.fromtimestamp(int(raw), tz=datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise UserError(f"SOURCE_DATE_EPOCH='{raw}' is not a number of seconds since 1970-01-01.") from None


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
    timestamp: datetime.datetime | None = None,
) -> Path:
    """Assemble the staged prefix ``payload_dir`` into a package in ``out_dir``; return its path.

    Everything in index.json and about.json comes from the rendered recipe ``meta`` (selectors applied).
    """
    from rattler_build import ArchiveType, RattlerBuildError, assemble_package

    check_options(options)
    about = meta.get("about") or {}
    archive = ArchiveType.TarBz2 if options.conda_format == "tar.bz2" else ArchiveType.Conda
    try:
        output = assemble_package(
            name=str(meta["package"]["name"]),
            version=str(meta["package"]["version"]),
            target_platform=subdir,
            build_string=str(meta["build"]["string"]),
            build_number=int(meta["build"]["number"]),
            output_dir=out_dir,
            files_dir=payload_dir,
            depends=_specs(meta, "requirements", "run"),
            constrains=_specs(meta, "requirements", "run_constrained"),
            homepage=about.get("home"),
            license=about.get("license"),
            license_family=about.get("license_family"),
            summary=about.get("summary"),
            description=about.get("description"),
            license_files=[str(p) for p in licenses] or None,
            recipe_dir=recipe_dir,
            compression_level=options.compression_level,
            compression_threads=options.compression_threads,
            archive_type=archive,
            timestamp=timestamp,
            # A wheel holds no build prefix to replace at install time (it is relocatable by construction), and
            # scanning a 1 GB payload for one costs time for nothing.
            detect_prefix=False,
        )
    except RattlerBuildError as exc:
        raise StageFailed(STAGE, f"assembling the package in {out_dir} failed: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise StageFailed(STAGE, f"the rendered recipe in {recipe_dir} lacks a package field: {exc}") from None
    return Path(output.path)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    check_options(ctx.options)
    wheel_artifact = ctx.inputs.get("wheel")
    if wheel_artifact is None:
        raise StageFailed(STAGE, "no wheel to package: the repair stage recorded no 'wheel' output")
    wheel = read_wheel(wheel_artifact.path)
    requires = wheel_requires(wheel, plan)
    rendered = recipe.render(
        plan, ctx.stage_dir("recipe"), wheel_path=_relative(wheel.path, ctx.root), wheel_requires=requires
    )

    out_dir = ctx.stage_dir(STAGE)
    for stale in [*out_dir.glob("*.conda"), *out_dir.glob("*.tar.bz2")]:
        stale.unlink()
    staging = out_dir / "payload"
    shutil.rmtree(staging, ignore_errors=True)
    started = time.perf_counter()
    payload = unpack_wheel(wheel, plan, staging)
    unpacked = time.perf_counter() - started

    name = archive_filename(plan, ctx.options.conda_format)
    what = (
        f"assembling {name}: {payload.files:,} files, {payload.size / 1e6:,.0f} MB, "
        f"{'zstd' if ctx.options.conda_format == 'conda' else 'bzip2'} level {ctx.options.compression_level}, "
        f"{ctx.options.compression_threads} thread(s)"
    )
    console.print(f"  {what} ...")
    started = time.perf_counter()
    with console.status(what + " ..."):
        path = assemble(
            rendered.meta,
            subdir=plan.conda.subdir,
            payload_dir=staging,
            out_dir=out_dir,
            options=ctx.options,
            recipe_dir=rendered.directory,
            licenses=license_files(wheel, payload, plan),
            timestamp=build_timestamp(),
        )
    assembled = time.perf_counter() - started
    shutil.rmtree(staging, ignore_errors=True)
    if path.name != name:
        raise StageFailed(STAGE, f"assembled {path} but the Plan names the package {name}")

    artifact = Artifact.of(path)
    message = (
        f"{name}: {artifact.size / 1e6:.1f} MB from {payload.files:,} files "
        f"(unpack {unpacked:.1f} s, assemble {assembled:.1f} s)"
    )
    if payload.scripts_not_made:
        message += f"; no {plan.platform} launchers for {', '.join(payload.scripts_not_made)}"
    return StageResult(outputs={"conda": artifact}, message=message)
