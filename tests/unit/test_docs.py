"""README.md and docs/*.md, as a reader runs them: every fenced command either runs here (```bash run=quick, in a
temporary folder with this checkout's pipeline.py and matrix.yaml, with the exit code the fence names) or names
the tests that run it (```bash run=test after <!-- tested by: FILE::TEST ... -->, each of which must exist);
PowerShell is skipped (Windows only). The links between the pages resolve; every check code used in torchbuild/
is in docs/checks.md, every CLI option in docs/options.md, every matrix.yaml key in docs/matrix.md."""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from torchbuild.commands import options_reference
from torchbuild.commands.cli import build_parser
from torchbuild.config import matrix_schema
from torchbuild.config.matrix import parse
from torchbuild.plan import STAGES

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LANGUAGES = {"bash", "sh", "shell", "console"}
WINDOWS_LANGUAGES = {"powershell", "pwsh", "bat", "cmd", "batch"}
FENCE = re.compile(r"^```(\S*)(.*)$")
TESTED_BY = re.compile(r"<!--\s*tested by:\s*(.+?)\s*-->")
CODE = re.compile(r"\b(?:TB\d{3}|[PEW]\d{3}|C\d{4})\b")
README_LINES = 200


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    options: dict[str, str]
    text: str
    tested_by: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        options = dict(word.split("=", 1) for word in opening[2].split() if "=" in word)
        comment = TESTED_BY.search(lines[i - 1]) if i else None
        tested_by = tuple(comment[1].split()) if comment else ()
        found.append(Block(page, i + 1, opening[1], options, "\n".join(lines[i + 1 : end]), tested_by))
        i = end + 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def commands(text: str) -> list[str]:
    """One command per line, `\\` continuations joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_is_short() -> None:
    count = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert count < README_LINES, f"README.md has {count} lines; the rest belongs in docs/"


@pytest.mark.parametrize("block", [b for b in ALL if b.language in COMMAND_LANGUAGES], ids=lambda b: b.where)
def test_every_command_fence_is_marked(block: Block) -> None:
    assert block.options.get("run") in ("quick", "test"), (
        f"{block.where}: a ```{block.language} fence must say run=quick (run by this test) or run=test (with a "
        "<!-- tested by: ... --> comment before it)"
    )


QUICK = [(b, c) for b in ALL if b.options.get("run") == "quick" for c in commands(b.text)]


@pytest.mark.parametrize(("block", "command"), QUICK, ids=[f"{b.where}:{c[:60]}" for b, c in QUICK])
def test_quick_command_runs_with_its_documented_exit_code(block: Block, command: str, tmp_path: Path) -> None:
    for name in ("pipeline.py", "matrix.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "bench").symlink_to(ROOT / "bench")
    argv = shlex.split(command, comments=True)
    assert argv[0] == "python", f"{block.where}: a quick command runs python: {command}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    result = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    expected = {int(code) for code in block.options.get("exit", "0").split("|")}
    assert result.returncode in expected, f"{block.where}: `{command}` exited {result.returncode}:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    if block.options.get("shows") == "next":  # the text block after it holds lines of what the command prints
        shown = next(b for b in ALL if b.page == block.page and b.line > block.line and b.language == "text")
        printed = {" ".join(line.split()) for line in (result.stdout + result.stderr).splitlines()}
        missing = [line for line in shown.text.splitlines() if " ".join(line.split()) not in printed]
        assert not missing, f"{shown.where}: `{command}` does not print {missing}"


def _test_exists(test_id: str) -> bool:
    path, _, name = test_id.partition("::")
    file = ROOT / path
    if not file.is_file() or not name:
        return False
    tree = ast.parse(file.read_text(encoding="utf-8"))
    *classes, function = name.split("::")
    scope: list[ast.stmt] = tree.body
    for cls in classes:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls]
        if not found:
            return False
        scope = found[0].body
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function for n in scope)


TESTED = [b for b in ALL if b.options.get("run") == "test"]


@pytest.mark.parametrize("block", TESTED, ids=lambda b: b.where)
def test_an_expensive_command_names_tests_that_exist(block: Block) -> None:
    assert block.tested_by, f"{block.where}: run=test needs a <!-- tested by: FILE::TEST --> comment right before it"
    missing = [t for t in block.tested_by if not _test_exists(t)]
    assert not missing, f"{block.where}: no such test: {', '.join(missing)}"


@pytest.mark.parametrize("block", [b for b in ALL if b.language in WINDOWS_LANGUAGES], ids=lambda b: b.where)
def test_powershell_blocks_are_skipped_here(block: Block) -> None:
    assert commands(block.text)
    pytest.skip("skipped: PowerShell, Windows only")


def test_the_documented_test_command_is_what_ci_runs() -> None:
    # the README's and docs/development.md's `bash .ci/run` is exercised by CI itself (ci.yml runs it)
    assert any("bash .ci/run" in b.text for b in ALL if b.page.name == "README.md")


def test_ci_run_ends_with_the_readme_test_command() -> None:
    script = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert script[-1] == "python -m pytest", "the README says .ci/run runs `python -m pytest` last"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python -m pytest" in readme


def _anchors(page: Path) -> set[str]:
    slugs = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if heading := re.match(r"^#+\s+(.*)$", line):
            text = re.sub(r"[^\w\- ]", "", heading[1].strip().lower())
            slugs.add(text.replace(" ", "-"))
    return slugs


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_pages_resolve(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in _anchors(file)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_every_page_is_reachable_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_every_check_code_is_in_the_legend() -> None:
    used = {code for path in (ROOT / "torchbuild").rglob("*") if path.suffix in (".py", ".yaml")
            for code in CODE.findall(path.read_text(encoding="utf-8"))}  # fmt: skip
    legend = set(re.findall(r"^\| (\S+) \|", (ROOT / "docs" / "checks.md").read_text(encoding="utf-8"), re.M))
    assert used, "no check codes found in torchbuild/"
    missing = sorted(used - legend)
    assert not missing, f"check codes used in torchbuild/ but not in docs/checks.md: {missing}"


def _options(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = {s for a in sub._actions for s in a.option_strings if s not in ("-h", "--help")}
                found[name] |= {a.metavar or a.dest for a in sub._actions if not a.option_strings}
    return found


def _sections(text: str) -> dict[str, str]:
    """docs/options.md by its `## ` headings: "run" -> the run section, "Cell selection (run, plan, ...)" -> ..."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_cli_option_is_in_the_options_reference() -> None:
    reference = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    sections = _sections(reference)
    missing = []
    for command, options in _options(build_parser()).items():
        own = "".join(body for heading, body in sections.items()
                      if heading == command or re.search(rf"[(,] ?{command}[,)]", heading))  # fmt: skip
        assert own, f"docs/options.md has no section for the command {command}"
        missing += [f"{command} {option}" for option in sorted(options) if f"`{option}`" not in own]
    assert not missing, f"options of the CLI not in their command's section of docs/options.md: {missing}"
    commands_documented = set(re.findall(r"^\| `(\w+)` \|", reference, re.M))
    assert set(_options(build_parser())) <= commands_documented


def test_the_options_reference_tables_are_the_parsers() -> None:
    """Each table of docs/options.md (commands, options, their values, defaults and meanings) is what the parser
    gives, as ``--help`` says it."""
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    written = dict(options_reference.marked(text))
    made = options_reference.tables(build_parser())
    assert set(written) == set(made), f"docs/options.md marks {sorted(written)}, the parser has {sorted(made)}"
    stale = sorted(section for section in made if written[section] != made[section])
    assert not stale, (f"docs/options.md's tables {stale} differ from the parser: python -m "
                       "torchbuild.commands.options_reference docs/options.md")  # fmt: skip


def test_the_usage_page_lists_the_pin_step_and_every_stage_in_order() -> None:
    text = " ".join((ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split())
    found = re.search(r"A run is the pin step, then the stages: ([^.]+)\.", text)
    assert found, "docs/usage.md does not say what a run is (the pin step, then the stages)"
    assert [re.sub(r"\s*\(.*\)", "", name).strip() for name in found[1].split(",")] == list(STAGES)


def test_every_matrix_key_is_in_the_matrix_reference() -> None:
    reference = (ROOT / "docs" / "matrix.md").read_text(encoding="utf-8")
    keys = {*matrix_schema.TOP_LEVEL, *matrix_schema.BUILD_KEYS, *matrix_schema.INCLUDE_KEYS}
    missing = sorted(key for key in keys if f"| `{key}` |" not in reference)
    assert not missing, f"matrix.yaml keys not in a table of docs/matrix.md: {missing}"


def test_the_documented_matrix_example_loads() -> None:
    example = next(b for b in ALL if b.page.name == "matrix.md" and b.language == "yaml")
    matrix = parse(example.text, "docs/matrix.md")
    assert matrix.build.conda_builder == "rattler-build"
    assert any(cell.id == "win-64-cuda9.0-py3.6-torch1.1.0" for cell in matrix.cells())
