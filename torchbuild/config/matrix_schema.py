"""matrix.yaml's shape, typed: MatrixKeys (the top level), ExcludeEntry and IncludeEntry (an entry of ``exclude`` and
``include``), TorchSource (``torch`` as a mapping), PackageSource (a companion's checkout in ``packages`` as a
mapping) and BuildOptions (``build``, config/options.py) are the one place
each key, its type, its choices and whether it is required are written. config/matrix.py's tables below and the JSON
schema editors use (config/matrix_json_schema.py -> torchbuild/data/matrix.schema.json) derive from them. Also here:
an example of each key's valid value (shown with a wrong one) and the ranges of the numbers."""

from __future__ import annotations

import types
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, Union, get_args, get_origin

from torchbuild.config.option_fields import default, literal_choices, type_of
from torchbuild.config.options import BuildOptions
from torchbuild.knowledge.compat import PlatformName
from torchbuild.knowledge.cuda_wheels import DeclaredLibraries


@dataclass(frozen=True, kw_only=True)
class TorchSource:
    """``torch: {git_ref: main, build_version: nightly}``: every cell compiles that ref (the nightly of a branch);
    the command line's --wheel, --source-dir, --git-ref and --build-version replace it."""

    git_ref: str
    git_url: str | None = None
    build_version: str | None = None


@dataclass(frozen=True, kw_only=True)
class PackageSource:
    """``packages: {torchvision: {git_ref: v0.28.0}}``: a package beside torch compiled from a checkout against the
    cell's torch (on the command line: --companion-source NAME=DIR, --companion-ref NAME=REF). One of git_ref and
    source_dir; git_url defaults to the package's repository (companions.yaml); build_version replaces the version the
    checkout says (its version.txt + the commit), as --build-version does torch's."""

    git_ref: str | None = None
    git_url: str | None = None
    source_dir: str | None = None
    build_version: str | None = None


@dataclass(frozen=True, kw_only=True)
class ExcludeEntry:
    """An ``exclude`` entry: the cells whose values are all those it gives."""

    platform: PlatformName | None = None
    cuda: str | None = None
    python: str | None = None
    torch: str | None = None


@dataclass(frozen=True, kw_only=True)
class IncludeEntry(ExcludeEntry):
    """An ``include`` entry: one cell (platform, cuda and python required), its settings and the users' tests."""

    # field(): no default (the entry's own; a bare annotation would inherit ExcludeEntry's None)
    platform: PlatformName = field()
    cuda: str = field()
    python: str = field()
    declared_libraries: DeclaredLibraries | None = None
    test_command: str | None = None
    test_requires: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class MatrixKeys:
    """matrix.yaml's top-level keys, in the order messages list them (the file's shape, never built: config/matrix.py
    reads the file into a Matrix)."""

    torch: str | TorchSource  # latest, a release, or a branch to compile: {git_ref, git_url, build_version}
    platforms: tuple[PlatformName, ...]
    cuda: tuple[str, ...]
    python: tuple[str, ...]
    exclude: tuple[ExcludeEntry, ...]
    include: tuple[IncludeEntry, ...]
    channel: str
    build_number: int
    build: BuildOptions
    # a list (torch, torchvision==0.28.0), or a mapping of the packages beside torch: each to its paired release
    # (null), a release, or a checkout to compile against the cell's torch (PackageSource)
    packages: tuple[str, ...] | dict[str, str | PackageSource | None]
    declared_libraries: DeclaredLibraries
    keep_nightlies: int  # at least 1 (MIN_INT)
    test_command: str  # the users' own tests (config/user_tests.py), run in both smoke environments
    test_requires: tuple[str, ...]


def without_none(hint: Any) -> Any:
    """``X | None`` -> X (None in an entry is a key not given; a null value is refused); any other type as it is."""
    if get_origin(hint) in (Union, types.UnionType):
        arms = [arm for arm in get_args(hint) if arm is not type(None)]
        return arms[0] if len(arms) == 1 else Union[tuple(arms)]  # noqa: UP007 (a Union built at run time)
    return hint


def required(cls: type) -> tuple[str, ...]:
    """The keys of a mapping ``cls`` (ExcludeEntry, IncludeEntry, TorchSource) that must be given."""
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def kind_of(key: str, hint: Any) -> str:
    """How config/matrix.py reads a top-level key of type ``hint``."""
    if key in TEST_KEYS:
        return "test"  # test_command and test_requires go to config/user_tests.py together
    if key == "packages":
        return "packages"  # checked by knowledge/companions.py
    if hint is BuildOptions:
        return "build"
    if literal_choices(hint):
        return "choice"
    if get_origin(hint) in (Union, types.UnionType):
        return "torch"  # a value or a mapping
    if get_origin(hint) is tuple:
        return "rules" if is_dataclass(get_args(hint)[0]) else "list"
    return {int: "int", str: "str"}[hint]


def _keys(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


TEST_KEYS = ("test_command", "test_requires")  # keys of the top level and of an include entry
# key -> kind
TOP_LEVEL = {f.name: kind_of(f.name, type_of(MatrixKeys, f.name)) for f in fields(MatrixKeys)}
RULE_KEYS = _keys(ExcludeEntry)
INCLUDE_KEYS = _keys(IncludeEntry)
INCLUDE_REQUIRED = required(IncludeEntry)
TORCH_SOURCE_KEYS = _keys(TorchSource)  # torch: {git_ref: main, build_version: nightly}
PACKAGE_SOURCE_KEYS = _keys(PackageSource)  # packages: {torchvision: {git_ref: v0.28.0}}
# build key -> kind ("float" or "str": a choice, "auto" or a number are all read as text)
BUILD_KEYS = {f.name: "float" if type_of(BuildOptions, f.name) is float else "str" for f in fields(BuildOptions)}
# build key -> its choices, for the keys whose type is a Literal
CHOICES = {
    name: found for name in BUILD_KEYS if (found := literal_choices(type_of(BuildOptions, name)))
}
# What a valid value of each key looks like, shown with a wrong type.
EXAMPLES = {
    "the matrix": "torch: latest",
    "torch": 'torch: "2.5.1" (or latest, or a branch: torch: {git_ref: main, build_version: nightly})',
    "git_ref": "git_ref: main",
    "git_url": "git_url: https://github.com/pytorch/pytorch",
    "build_version": "build_version: nightly",
    "platforms": "platforms: [win-64, linux-64]",
    "cuda": 'cuda: [cpu, "12.6"]',
    "python": 'python: ["3.11", "3.12"]',
    "exclude": 'exclude: [{platform: linux-64, cuda: "12.6"}]',
    "include": 'include: [{platform: win-64, cuda: "9.0", python: "3.6"}]',
    "channel": "channel: s3://bucket/prefix",
    "build_number": "build_number: 0",
    "build": "build: {max_jobs: auto, timeout_hours: 6}",
    "platform": "platform: linux-64",
    "max_jobs": "max_jobs: 4",
    "msvc_toolset": 'msvc_toolset: "14.29"',
    "timeout_hours": "timeout_hours: 6",
    "packages": "packages: [torch, torchvision, torchaudio]",
    "source_dir": "source_dir: ~/src/vision",
    "declared_libraries": "declared_libraries: keep",
    "keep_nightlies": "keep_nightlies: 7",
    "test_command": 'test_command: "pytest {project}/tests"',
    "test_requires": "test_requires: [pytest]",
}
EXAMPLES.update({name: f"{name}: {default(BuildOptions, name)}" for name in CHOICES})  # a choice: its default
MIN_INT = {"keep_nightlies": 1}  # the integers whose least value is not 0


# Ranges: build_number stays within a signed 32-bit integer (what every tool reading a package's index can hold);
# timeout_hours within a month (longer than any CI lets a job run; the build's timer cannot hold much more);
# max_jobs within what any build host has.
MAX_INT = 2**31 - 1
FLOAT_RANGES = {"timeout_hours": (0.0, 24.0 * 31)}
MAX_JOBS = 4096
