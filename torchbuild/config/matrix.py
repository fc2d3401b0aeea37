"""matrix.yaml: what the nightly builds. Loading validates every key with its line number.

The file is read as a YAML node tree (not plain Python values) so that every error can name its line, and so
that versions keep the text the user wrote (``12.10`` stays ``12.10``, not the float ``12.1``).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import yaml

from torchbuild.config.channel_spec import check_spec
from torchbuild.config.matrix_nodes import (
    MatrixError,
    integer,
    number,
    pairs,
    platform_value,
    scalar,
    sequence,
    unknown_key,
    where,
)
from torchbuild.config.matrix_schema import (
    BUILD_KEYS,
    CHOICES,
    INCLUDE_KEYS,
    INCLUDE_REQUIRED,
    MAX_JOBS,
    RULE_KEYS,
    TEST_KEYS,
    TOP_LEVEL,
    TORCH_SOURCE_KEYS,
    PackageSource,
    TorchSource,
)
from torchbuild.config.nesting import DepthLimitedLoader
from torchbuild.config.option_fields import literal_choices
from torchbuild.config.options import BuildOptions
from torchbuild.config.package_sources import Sources, read_mapping
from torchbuild.config.user_tests import UserTestKeys, check_requires, split
from torchbuild.errors import UserError, one_of
from torchbuild.knowledge.companions import check_packages
from torchbuild.knowledge.compat import CPU, PLATFORMS
from torchbuild.knowledge.cuda_wheels import DeclaredLibraries

LATEST = "latest"
DECLARED_CHOICES = literal_choices(DeclaredLibraries)  # keep | vendor
VENDOR_SUFFIX = "-vendor"  # the id of a cell that vendors them: win-64-cpu-py3.12-torch2.3.1-vendor


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One point of the matrix: a platform, CUDA (or cpu), Python and requested torch version."""

    platform: str
    cuda: str
    python: str
    torch: str = LATEST
    # keep | vendor: the matrix's (top level, or this cell's include entry), or --declared-libraries; None: upstream's.
    # "vendor" is in the id, so a vendoring run has a build/<cell-id> (state, caches) of its own; "keep" and None are
    # not: upstream keeps on every platform (cuda_wheels.yaml declared_libraries.upstream), so ids stay as they were.
    declared_libraries: DeclaredLibraries | None = None

    @property
    def id(self) -> str:
        """Stable id: does not change when ``latest`` moves to a new release."""
        return self.point_id + (VENDOR_SUFFIX if self.declared_libraries == "vendor" else "")

    @property
    def point_id(self) -> str:
        """The id of the matrix point (platform, CUDA, Python, torch), whatever its keep | vendor setting."""
        accel = "cpu" if self.cuda == CPU else f"cuda{self.cuda}"
        base = f"{self.platform}-{accel}-py{self.python}"
        return base if self.torch == LATEST else f"{base}-torch{self.torch}"


@dataclass(frozen=True, kw_only=True)
class Matrix:
    torch: str = LATEST
    source: TorchSource | None = None
    platforms: tuple[str, ...] = PLATFORMS
    cuda: tuple[str, ...] = (CPU,)
    python: tuple[str, ...] = ("3.11",)
    exclude: tuple[dict[str, str], ...] = ()
    include: tuple[dict[str, str], ...] = ()
    channel: str = "channel"
    build_number: int = 0
    build: BuildOptions = field(default_factory=BuildOptions)
    # the packages every cell ships (torch, torchvision, torchaudio; a companion as name==release pins it);
    # None: torch and each companion whose release pairs with the cell's torch (knowledge/pairing.py)
    packages: tuple[str, ...] | None = None
    # the packages compiled from a checkout against each cell's torch (packages as a mapping, --companion-source,
    # --companion-ref): name -> its checkout (config/package_sources.py)
    package_sources: Sources = ()
    declared_libraries: DeclaredLibraries | None = None  # for every cell; None: upstream's choice per cell
    keep_nightlies: int | None = None  # what ``index --matrix`` keeps of the nightlies; None: every one
    tests: UserTestKeys = field(default_factory=UserTestKeys)  # test_command, test_requires of the top level
    include_tests: tuple[UserTestKeys, ...] = ()  # those of each include entry, in the order of ``include``
    path: str = "<defaults>"

    def cells(self) -> list[Cell]:
        """Cross product minus ``exclude``, plus ``include``, in file order, without duplicates."""
        cells: list[Cell] = []
        for platform in self.platforms:
            for cuda in self.cuda:
                for python in self.python:
                    cell = self.cell(platform=platform, cuda=cuda, python=python, torch=self.torch)
                    if not any(_matches(cell, rule) for rule in self.exclude):
                        cells.append(cell)
        for rule in self.include:
            cell = Cell(
                platform=rule["platform"],
                cuda=rule["cuda"],
                python=rule["python"],
                torch=rule.get("torch", self.torch),
                declared_libraries=_declared_of(rule, self.declared_libraries),
            )
            same = next((i for i, c in enumerate(cells) if c.point_id == cell.point_id), None)
            if same is None:
                cells.append(cell)
            elif "declared_libraries" in rule:  # an include entry that sets the setting of a matrix cell
                cells[same] = cell
        return cells

    def user_tests(self, cell: Cell) -> UserTestKeys:
        """The test keys of ``cell``: those of the include entries of its matrix point (the last one wins) over the
        top level's."""
        keys = self.tests
        for rule, over in zip(self.include, self.include_tests, strict=False):
            point = Cell(platform=rule["platform"], cuda=rule["cuda"], python=rule["python"],
                         torch=rule.get("torch", self.torch))  # fmt: skip
            if point.point_id == cell.point_id:
                keys = over.over(keys)
        return keys

    def source_of(self, name: str) -> PackageSource | None:
        """The checkout ``name`` is compiled from, or None where it is not compiled (PyPI's wheel, paired)."""
        return next((source for given, source in self.package_sources if given == name), None)

    def cell(self, *, platform: str, cuda: str, python: str, torch: str) -> Cell:
        """A cell of this matrix's settings (its declared_libraries), in the matrix or outside it (--cuda --py)."""
        setting = self.declared_libraries
        return Cell(platform=platform, cuda=cuda, python=python, torch=torch, declared_libraries=setting)


def _declared_of(rule: dict[str, str], otherwise: DeclaredLibraries | None) -> DeclaredLibraries | None:
    """An include entry's keep | vendor setting (checked when the file was read), else ``otherwise``."""
    value = rule.get("declared_libraries")
    return otherwise if value is None else check_declared(value, "declared_libraries")


def _matches(cell: Cell, rule: dict[str, str]) -> bool:
    return all(getattr(cell, key) == value for key, value in rule.items())


def _declared(path: str, node: yaml.Node, value: str) -> DeclaredLibraries:
    try:
        return check_declared(value, "declared_libraries")
    except UserError as exc:
        raise MatrixError(f"{where(path, node)}: {exc}") from None


def check_declared(value: str, what: str) -> DeclaredLibraries:
    """A keep | vendor setting (``what``: where it was given, for the message)."""
    if value not in DECLARED_CHOICES:
        raise UserError(
            f"{what} '{value}' is not one of {one_of(DECLARED_CHOICES)}: keep leaves the libraries a wheel's declared "
            "requirements install (mkl, nvidia-*) to those requirements, vendor puts them into the wheel."
        )
    return cast(DeclaredLibraries, value)


def _channel(path: str, node: yaml.Node) -> str:
    """The channel, checked as --channel is (its form only: nothing is opened or asked at load time)."""
    spec = scalar(path, "channel", node)
    try:
        check_spec(spec)
    except UserError as exc:
        raise MatrixError(f"{where(path, node)}: channel: {exc}") from None
    return spec

def _packages(path: str, node: yaml.Node) -> tuple[tuple[str, ...], Sources]:
    """``packages``: a list (torch, torchvision==0.28.0) or a mapping (config/package_sources.py), as the list form's
    texts and the checkouts the mapping names."""
    texts, sources = read_mapping(path, node) if isinstance(node, yaml.MappingNode) else \
        (sequence(path, "packages", node), ())  # fmt: skip
    try:
        return check_packages(texts), sources
    except UserError as exc:
        raise MatrixError(f"{where(path, node)}: packages: {exc}") from None


def _test_key(path: str, key: str, node: yaml.Node, keys: UserTestKeys) -> UserTestKeys:
    """``keys`` with ``key`` (test_command or test_requires) read from ``node``."""
    try:
        if key == "test_command":
            command = scalar(path, key, node)
            split(command)  # refused now, not after the build
            return replace(keys, command=command)
        return replace(keys, requires=check_requires(sequence(path, key, node)))
    except MatrixError:
        raise
    except UserError as exc:
        raise MatrixError(f"{where(path, node)}: {exc}") from None


def _rules(
    path: str, key: str, node: yaml.Node
) -> tuple[tuple[dict[str, str], ...], tuple[UserTestKeys, ...]]:
    """The entries of ``exclude`` or ``include``, and the test keys of each (include only)."""
    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return (), ()
    if not isinstance(node, yaml.SequenceNode):
        raise MatrixError(f"{where(path, node)}: '{key}' must be a list of mappings like {{cuda: '9.0'}}.")
    rules = []
    tests = []
    for item in node.value:
        rule: dict[str, str] = {}
        keys = UserTestKeys()
        valid = INCLUDE_KEYS if key == "include" else RULE_KEYS
        for key_node, value_node in pairs(path, f"{key} entry", item):
            if key_node.value not in valid:
                raise unknown_key(path, key_node, key_node.value, valid)
            if key_node.value in TEST_KEYS:
                keys = _test_key(path, key_node.value, value_node, keys)
                continue
            rule[key_node.value] = scalar(path, key, value_node, f"'{key_node.value}' in an {key} entry")
            if key_node.value == "platform":
                platform_value(path, value_node, rule["platform"])
            if key_node.value == "declared_libraries":
                _declared(path, value_node, rule["declared_libraries"])
        if not rule and keys == UserTestKeys():
            raise MatrixError(f"{where(path, item)}: an empty '{key}' entry would match every cell.")
        if key == "include":
            missing = [k for k in INCLUDE_REQUIRED if k not in rule]
            if missing:
                raise MatrixError(f"{where(path, item)}: an include entry needs {one_of(missing)}.")
        rules.append(rule)
        tests.append(keys)
    return tuple(rules), tuple(tests)


def _build(path: str, node: yaml.Node) -> BuildOptions:
    values: dict[str, object] = {}
    for key_node, value_node in pairs(path, "build", node):
        key = key_node.value
        kind = BUILD_KEYS.get(key)
        if kind is None:
            raise unknown_key(path, key_node, key, list(BUILD_KEYS))
        value: object = number(path, key, value_node) if kind == "float" else scalar(path, key, value_node)
        if key in CHOICES and value not in CHOICES[key]:
            raise MatrixError(
                f"{where(path, value_node)}: build.{key} '{value}' is not one of {one_of(CHOICES[key])}."
            )
        if (
            key == "max_jobs"
            and value != "auto"
            and not (isinstance(value, str) and value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_JOBS)
        ):
            raise MatrixError(
                f"{where(path, value_node)}: build.max_jobs must be 'auto' or an integer from 1 to {MAX_JOBS}, "
                f"not '{value}'."
            )
        values[key] = value
    return BuildOptions(**values)  # type: ignore[arg-type]


def parse(text: str, path: str = "matrix.yaml") -> Matrix:
    try:
        root = yaml.compose(text, Loader=DepthLimitedLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise MatrixError(f"{path}{line}: invalid YAML: {problem}.") from None
    if root is None:
        raise MatrixError(f"{path}: the file is empty; see docs/matrix.md for the keys a matrix takes.")
    values: dict[str, object] = {"path": path}
    tests = UserTestKeys()
    for key_node, value_node in pairs(path, "the matrix", root):
        key = key_node.value
        kind = TOP_LEVEL.get(key)
        if kind is None:
            raise unknown_key(path, key_node, key, list(TOP_LEVEL))
        if key == "channel":
            values[key] = _channel(path, value_node)
        elif kind == "torch" and isinstance(value_node, yaml.MappingNode):
            values["source"] = _torch_source(path, value_node)
        elif kind in ("torch", "str"):
            values[key] = scalar(path, key, value_node)
        elif kind == "list":
            values[key] = sequence(path, key, value_node)
        elif kind == "int":
            values[key] = integer(path, key, value_node)
        elif kind == "packages":
            values[key], values["package_sources"] = _packages(path, value_node)
        elif kind == "choice":
            values[key] = _declared(path, value_node, scalar(path, key, value_node))
        elif kind == "rules":
            values[key], included = _rules(path, key, value_node)
            if key == "include":
                values["include_tests"] = included
        elif kind == "test":
            tests = _test_key(path, key, value_node, tests)
        else:
            values[key] = _build(path, value_node)
    return Matrix(**values, tests=tests)  # type: ignore[arg-type]


def _torch_source(path: str, node: yaml.Node) -> TorchSource:
    values: dict[str, str] = {}
    for key_node, value_node in pairs(path, "torch", node):
        if key_node.value not in TORCH_SOURCE_KEYS:
            raise unknown_key(path, key_node, key_node.value, TORCH_SOURCE_KEYS)
        values[key_node.value] = scalar(path, key_node.value, value_node, f"torch.{key_node.value}")
    if "git_ref" not in values:
        raise MatrixError(f"{where(path, node)}: 'torch' as a mapping names the branch to compile: give git_ref, e.g. "
                          "torch: {git_ref: main, build_version: nightly}.")  # fmt: skip
    return TorchSource(**values)


def load(path: Path) -> Matrix:
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "is not a regular file" if path.exists() else "no such file"
        raise MatrixError(f"{path}: {what}; give a matrix file (use --matrix PATH).")
    return parse(decode(path.read_bytes(), str(path)), str(path))


# Byte-order marks, longest first (UTF-32's begin as UTF-16's do): PowerShell's `>` writes UTF-16 with one.
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode(data: bytes, path: str) -> str:
    """The text of a matrix file: UTF-8, or UTF-8/16/32 with a byte-order mark (as YAML allows). Anything else is
    refused naming the line of its first bad byte."""
    encoding = next((name for bom, name in BOMS if data.startswith(bom)), "utf-8")
    save_as = "save it as UTF-8 (PowerShell: Set-Content -Encoding utf8)"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1 if encoding == "utf-8" else 1
        name = encoding.upper().removesuffix("-SIG")
        raise MatrixError(
            f"{path}:{line}: the file is not valid {name} (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"{save_as}."
        ) from None
    if "\0" in text:
        raise MatrixError(
            f"{path}: the file holds NUL characters (UTF-16 or UTF-32 without a byte-order mark?); {save_as}."
        )
    return text


def with_packages(matrix: Matrix, packages: str | None) -> Matrix:
    """``--packages torch,torchvision``: the packages of every selected cell, checked as the matrix's are."""
    if packages is None:
        return matrix
    try:
        texts = check_packages(tuple(p for p in packages.split(",") if p.strip()))
    except UserError as exc:
        raise UserError(f"--packages {packages}: {exc}") from None
    return replace(matrix, packages=texts)


def with_package_sources(matrix: Matrix, given: Sources) -> Matrix:
    """The command line's checkouts (--companion-source, --companion-ref) over the matrix's; each package they name
    ships (added to a ``packages`` list that leaves it out)."""
    if not given:
        return matrix
    named = dict(given)
    sources = tuple((name, source) for name, source in matrix.package_sources if name not in named) + given
    packages = matrix.packages
    if packages is not None:
        packages = tuple(t for t in packages if t.partition("==")[0].strip().lower() not in named or "==" not in t)
        listed = {text.strip().lower() for text in packages}
        packages += tuple(name for name in named if name not in listed)
    return replace(matrix, package_sources=sources, packages=packages)


def with_declared_libraries(cells: list[Cell], choice: str | None) -> list[Cell]:
    """``--declared-libraries keep|vendor``: the setting of every selected cell, over the matrix's."""
    if choice is None:
        return cells
    checked = check_declared(choice, "--declared-libraries")
    return [replace(cell, declared_libraries=checked) for cell in cells]
