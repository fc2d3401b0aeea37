"""The house reads at a glance: no module of torchbuild over 400 lines, and no stage module reads torchbuild/data
itself (every fact a stage needs from a table is a field of the Plan). The layering of config (what the user says)
above knowledge (what the project knows) is import-linter's (pyproject.toml, `lint-imports` in .ci/run)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "torchbuild"
KNOWLEDGE = PACKAGE / "knowledge"
STAGES = PACKAGE / "stages"
MAX_LINES = 400
DATA_READER = "datafiles"  # knowledge/datafiles.py: the one reader of torchbuild/data; every function of it reads

Target = tuple[str, str]  # (knowledge module, module-level name)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_of_torchbuild_is_over_400_lines() -> None:
    lengths = {_relative(p): len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(lengths) > 150  # the whole package was read
    assert {path: n for path, n in lengths.items() if n > MAX_LINES} == {}


def _aliases(tree: ast.Module) -> dict[str, Target | str]:
    """Each name a module binds to a knowledge module (-> its module name) or to a name of one (-> the pair)."""
    found: dict[str, Target | str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torchbuild.knowledge":
            found.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchbuild.knowledge."):
            module = (node.module or "").rsplit(".", 1)[1]
            found.update({a.asname or a.name: (module, a.name) for a in node.names})
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torchbuild.knowledge.") and a.asname:
                    found[a.asname] = a.name.rsplit(".", 1)[1]
    return found


def _references(
    tree: ast.AST, aliases: dict[str, Target | str], own: str | None = None
) -> Iterator[tuple[int, Target]]:
    """The knowledge names a tree refers to (``module.name`` or a name imported from a module), with their line;
    ``own``: the knowledge module the tree is of, whose own module-level names count too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            bound = aliases.get(node.value.id)
            if isinstance(bound, str):
                yield node.lineno, (bound, node.attr)
        elif isinstance(node, ast.Name):
            bound = aliases.get(node.id)
            if isinstance(bound, tuple):
                yield node.lineno, bound
            elif bound is None and own is not None:
                yield node.lineno, (own, node.id)


def _table_readers() -> set[Target]:
    """The module-level functions of knowledge/ that read a table: those that refer to the data reader's functions,
    or to a function that does, in their module or another (``data = data or load()`` counts: it may read)."""
    uses: dict[Target, set[Target]] = {}
    for path in KNOWLEDGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = _aliases(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                uses[(path.stem, node.name)] = {target for _, target in _references(node, aliases, own=path.stem)}
    readers = {key for key, targets in uses.items() if key[0] == DATA_READER}
    while True:
        more = {key for key, targets in uses.items() if key not in readers and targets & readers}
        if not more:
            return readers
        readers |= more


def test_the_table_readers_are_found_through_their_modules() -> None:
    readers = _table_readers()
    assert ("era_names", "load") in readers and ("dll_providers", "redistributable_dlls") in readers
    assert ("pairing", "torch_pins") in readers  # through companions.load()
    assert ("dll_providers", "matches") not in readers and ("compat", "version_key") not in readers


def test_no_stage_module_reads_torchbuild_data_itself() -> None:
    readers = _table_readers()
    found = []
    for path in sorted(STAGES.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = _aliases(tree)
        if DATA_READER in aliases:
            found.append(f"{_relative(path)}: imports knowledge/{DATA_READER}.py")
        found += [f"{_relative(path)}:{line}: {'.'.join(target)} reads a data table"
                  for line, target in _references(tree, aliases) if target in readers]  # fmt: skip
        if any(isinstance(node, ast.Constant) and node.value == "torchbuild.data" for node in ast.walk(tree)):
            found.append(f"{_relative(path)}: opens the package torchbuild.data")
    assert found == []
