"""The packages a cell compiles beside torch from a checkout, as the user names them: a matrix.yaml ``packages``
mapping (``{torchvision: {git_ref: v0.28.0}}``, ``{torchvision: {source_dir: ~/src/vision}}``; there a release or
null ships that release or the paired one, as the list form does) and the command line's ``--companion-source
NAME=DIR`` and ``--companion-ref NAME=REF``. Each checkout is compiled against the cell's own torch: the pin step
reads its version (pin/companion_checkouts.py), the build stage compiles it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from torchbuild.config.matrix_nodes import MatrixError, pairs, scalar, unknown_key, where
from torchbuild.config.matrix_schema import PACKAGE_SOURCE_KEYS, PackageSource
from torchbuild.errors import UserError, one_of
from torchbuild.knowledge.companions import TORCH, companion_names, parse_package

Sources = tuple[tuple[str, PackageSource], ...]  # each package compiled from a checkout, and its checkout
NULL = "tag:yaml.org,2002:null"
EXAMPLE = "packages: {torchvision: {git_ref: v0.28.0}} or {torchvision: {source_dir: ~/src/vision}}"


def read_mapping(path: str, node: yaml.Node) -> tuple[tuple[str, ...], Sources]:
    """``packages`` as a mapping: what the list form would say (torch first; ``name==release`` for a release) and
    the checkouts named."""
    if isinstance(node, yaml.MappingNode) and not node.value:
        raise MatrixError(f"{where(path, node)}: 'packages' is an empty mapping: leave it out to ship each paired "
                          f"companion, or name them, e.g. {EXAMPLE}.")  # fmt: skip
    texts: list[str] = [TORCH]
    sources: list[tuple[str, PackageSource]] = []
    for key_node, value_node in pairs(path, "packages", node):
        name = str(key_node.value)
        at = where(path, key_node)
        try:
            parse_package(name)
        except UserError as exc:
            raise MatrixError(f"{at}: packages: {exc}") from None
        is_null = isinstance(value_node, yaml.ScalarNode) and (value_node.tag == NULL or value_node.value == "")
        if name == TORCH:
            if not is_null:
                raise MatrixError(f"{at}: packages: torch's source is the top-level 'torch:' (a release, or "
                                  "{git_ref: main, build_version: nightly}); in packages, torch takes no value.")
            continue
        if is_null:
            texts.append(name)
        elif isinstance(value_node, yaml.ScalarNode):
            texts.append(f"{name}=={scalar(path, name, value_node)}")
        else:
            texts.append(name)
            sources.append((name, _source(path, name, value_node, Path(path).parent)))
    return tuple(texts), tuple(sources)


def _source(path: str, name: str, node: yaml.Node, folder: Path) -> PackageSource:
    values: dict[str, str] = {}
    for key_node, value_node in pairs(path, name, node):
        if key_node.value not in PACKAGE_SOURCE_KEYS:
            raise unknown_key(path, key_node, key_node.value, PACKAGE_SOURCE_KEYS)
        values[key_node.value] = scalar(path, key_node.value, value_node, f"{name}.{key_node.value}")
    try:
        return checked(name, PackageSource(**values), folder)
    except UserError as exc:
        raise MatrixError(f"{where(path, node)}: packages: {exc}") from None


def checked(name: str, source: PackageSource, folder: Path) -> PackageSource:
    """``source`` as a checkout of ``name`` can be: one of git_ref and source_dir (a folder given relative to
    ``folder``, where the matrix file is), git_url only with git_ref, build_version a PEP 440 version."""
    if (source.git_ref is None) == (source.source_dir is None):
        raise UserError(f"{name}: give one of git_ref (a tag, branch or commit of its repository) and source_dir "
                        f"(a checkout on this machine), e.g. {EXAMPLE}.")  # fmt: skip
    if source.git_url is not None and source.git_ref is None:
        raise UserError(f"{name}: git_url names the repository git_ref is cloned from; add git_ref, or leave git_url "
                        "out.")  # fmt: skip
    if source.build_version is not None:
        try:
            Version(source.build_version)
        except InvalidVersion:
            raise UserError(f"{name}: build_version {source.build_version!r} is not a PEP 440 version (e.g. "
                            "0.28.0a0+mine); leave it out to keep the checkout's own.") from None  # fmt: skip
    if source.source_dir is None:
        return source
    folder_of = (folder / Path(source.source_dir).expanduser()).resolve()
    return PackageSource(source_dir=str(folder_of), build_version=source.build_version)


def from_command_line(source_dirs: Sequence[str], git_refs: Sequence[str]) -> Sources:
    """``--companion-source NAME=DIR`` and ``--companion-ref NAME=REF``, each package once."""
    found: dict[str, PackageSource] = {}
    given = [("--companion-source", text) for text in source_dirs] + [("--companion-ref", text) for text in git_refs]
    for flag, text in given:
        name, sep, value = text.partition("=")
        name = name.strip().lower()
        if not sep or not value.strip() or name not in companion_names():
            raise UserError(f"{flag} {text}: give NAME={'DIR' if flag.endswith('source') else 'REF'}, NAME one of "
                            f"{one_of(companion_names())} (e.g. {flag} torchvision="
                            f"{'~/src/vision' if flag.endswith('source') else 'v0.28.0'}).")  # fmt: skip
        if name in found:
            raise UserError(f"{flag} {text}: {name} is given a checkout twice; give one per package.")
        if flag == "--companion-source":
            folder = Path(value.strip()).expanduser()
            if not folder.is_dir():
                raise UserError(f"{flag} {text}: no such directory (give the root of a {name} checkout).")
            found[name] = PackageSource(source_dir=str(folder.resolve()))
        else:
            found[name] = PackageSource(git_ref=value.strip())
    return tuple(found.items())
