"""docs/options.md's tables of the commands and their options, written from the parser (commands/cli.py), so that
the reference says what ``--help`` says: ``python -m torchbuild.commands.options_reference docs/options.md``
rewrites each table between its markers (``<!-- options: run -->`` ... ``<!-- /options -->``), the prose around
them as it is; tests/unit/test_docs.py fails while a table differs from what the parser gives.

A row's Default is "required", the parser's default, or what its help says in ``(default: ...)``; its Value the
option's choices, else its metavar; its Meaning the rest of the help. The download cache's default is this
machine's folder in ``--help``, and each OS's in the reference."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from torchbuild.commands.cli import build_parser
from torchbuild.commands.selection import SELECTION
from torchbuild.knowledge.cache_folder import user_cache_dir

MARKED = re.compile(r"(<!-- options: (?P<section>[\w-]+) -->\n)(?P<table>.*?)(<!-- /options -->)", re.S)
COMMANDS = "commands"  # the section of the table of commands; "selection": the cell selection options
DEFAULT = re.compile(r"\s*\(default:? (?P<default>.+)\)$", re.S)
ANGLED = re.compile(r"[\w./$-]*<[\w-]+>[\w./<>$-]*")  # <channel>/<subdir>/repodata.json: code, or HTML would eat it
CACHE_FOLDERS = "`~/.cache/torchbuild` (Linux), `%LOCALAPPDATA%\\torchbuild\\Cache` (Windows)"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Each command -> its parser and its one-line help."""
    for action in parser._actions:  # argparse keeps its subparsers there only
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps[name]) for name, sub in action.choices.items()}
    raise AssertionError("the parser has no commands")


def _selection(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return next((g._group_actions for g in parser._action_groups if g.title == SELECTION), [])


def _text(text: str) -> str:
    """``text`` for a Markdown table cell."""
    text = ANGLED.sub(lambda m: f"`{m.group()}`", " ".join(text.split()))
    return text.replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    metavar = action.metavar if isinstance(action.metavar, str) else None
    choices = action.choices or (metavar.split("|") if metavar and "|" in metavar else None)
    if choices:
        return ", ".join(f"`{c}`" for c in choices)
    value = _text(metavar or action.dest.upper())
    return f"{value} ..." if action.nargs in ("+", "*") else value


def _row(action: argparse.Action) -> str:
    option = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    meaning = action.help or ""
    found = DEFAULT.search(meaning)
    default = found["default"] if found else ""
    meaning = meaning[: found.start()] if found else meaning
    if action.required:
        default = "required"
    elif action.default not in (None, False, argparse.SUPPRESS):
        default = f"`{action.default}`"
    elif default == f"{user_cache_dir()}, the user's cache folder":
        default = CACHE_FOLDERS
    else:
        default = _text(default)
    return f"| {option} | {_value(action)} | {default} | {_text(meaning)} |"


def _options_table(actions: list[argparse.Action]) -> str:
    rows = [_row(a) for a in actions if not isinstance(a, argparse._HelpAction)]
    return "\n".join(["| Option | Value | Default | Meaning |", "|---|---|---|---|", *rows]) + "\n"


def tables(parser: argparse.ArgumentParser | None = None) -> dict[str, str]:
    """Each section of the reference -> its table: the commands, the cell selection options, and each command's
    own options (those commands that have some)."""
    commands = _subcommands(parser or build_parser())
    found = {COMMANDS: "\n".join(["| Command | What it does |", "|---|---|",
                                  *(f"| `{name}` | {_text(text)} |" for name, (_, text) in commands.items())]) + "\n"}
    run_parser, _ = commands["run"]
    found["selection"] = _options_table(_selection(run_parser))
    for name, (sub, _) in commands.items():
        shared = set(map(id, _selection(sub)))
        own = [a for a in sub._actions if id(a) not in shared and not isinstance(a, argparse._HelpAction)]
        if own:
            found[name] = _options_table(own)
    return found


def marked(text: str) -> Iterator[tuple[str, str]]:
    """Each marked section of ``text`` and the table written there."""
    for match in MARKED.finditer(text):
        yield match["section"], match["table"]


def rewritten(text: str, parser: argparse.ArgumentParser | None = None) -> str:
    """``text`` with each marked table as the parser gives it."""
    made = tables(parser)
    return MARKED.sub(lambda m: m.group(1) + made[m["section"]] + m.group(4), text)


def main(argv: list[str]) -> int:
    (path,) = (Path(a) for a in argv) if len(argv) == 1 else (Path("docs/options.md"),)
    path.write_text(rewritten(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
