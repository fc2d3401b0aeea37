"""The users' own tests: matrix.yaml's ``test_command`` and ``test_requires`` (cibuildwheel's names), at the top level
and per include entry. The smoke stages install ``test_requires`` into each environment and run ``test_command`` there
after the built-in checks (stages/smoke/user_test.py).

The command runs without a shell (cibuildwheel hands it to one), the same on Linux, Windows and under Wine: ``&&``
chains commands, each split as a POSIX shell splits words (quotes, backslashes); the other shell operators (pipes,
redirections, ``;``, ``||``) are refused when the matrix is read, not after the build, and nothing is expanded (no
variables, no globs). ``{project}`` and ``{package}`` are replaced by the folder of matrix.yaml: torchbuild builds
torch, not the users' project, so both name the same folder.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement

from torchbuild.errors import UserError

CHAIN = "&&"
PLACEHOLDERS = ("{project}", "{package}")
OPERATORS = set("();<>|&")  # a word of these alone is a shell operator (shlex splits them off, unless quoted)


@dataclass(frozen=True, kw_only=True)
class UserTestKeys:
    """What one place of matrix.yaml (the top level, or an include entry) sets; None: not set there."""

    command: str | None = None
    requires: tuple[str, ...] | None = None

    def over(self, base: UserTestKeys) -> UserTestKeys:
        """These keys where set, else ``base``'s (an include entry over the top level)."""
        command = self.command if self.command is not None else base.command
        requires = self.requires if self.requires is not None else base.requires
        return UserTestKeys(command=command, requires=requires)


@dataclass(frozen=True, kw_only=True)
class UserTest:
    """The Plan's own test of a cell: the command as written, what it needs installed, and the folder its
    placeholders stand for."""

    command: str
    requires: tuple[str, ...]
    project: str  # absolute: the folder of matrix.yaml

    def commands(self, project: str | None = None) -> list[list[str]]:
        """The ``&&``-chained commands, each as its argv, the placeholders replaced by ``project`` (the folder as the
        environment sees it: a Windows path under Wine), by default the Plan's."""
        folder = self.project if project is None else project
        out = []
        for argv in split(self.command):
            replaced = []
            for word in argv:
                for placeholder in PLACEHOLDERS:
                    word = word.replace(placeholder, folder)
                replaced.append(word)
            out.append(replaced)
        return out


def split(command: str) -> list[list[str]]:
    """``command``'s ``&&``-chained commands, each split into words; UserError naming what cannot run without a
    shell."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        raise UserError(f"test_command '{command}' cannot be split into words: {exc}.") from None
    chains: list[list[str]] = [[]]
    for word in words:
        if word == CHAIN:
            chains.append([])
            continue
        if set(word) <= OPERATORS:
            raise UserError(
                f"test_command '{command}' uses '{word}', a shell feature: torchbuild runs each '&&'-separated "
                "command without a shell (on Linux, Windows and under Wine alike); put it in a script and run "
                "that, e.g. test_command: python {project}/tests/run.py."
            )
        chains[-1].append(word)
    if any(not argv for argv in chains):
        raise UserError(f"test_command '{command}' has an empty command (before or after '&&').")
    return chains


def check_requires(texts: tuple[str, ...]) -> tuple[str, ...]:
    """Each of ``test_requires`` a valid requirement (pip's syntax): ``pytest``, ``pytest>=8``, ``numpy==2.1.*``."""
    for text in texts:
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise UserError(f"test_requires '{text}' is not a valid requirement ({exc}), e.g. pytest>=8.") from None
    return texts
