"""Errors a user sees: one line (or a short block), no traceback, a fixed exit code."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class UserError(Exception):
    """Bad input or an unmet requirement. The CLI prints the message and exits with ``exit_code``."""

    exit_code = 2


class StageFailed(UserError):
    """A stage ran and failed; the message names the stage and the file."""

    exit_code = 1

    def __init__(self, stage: str, message: str, checks: Sequence[Any] = ()) -> None:
        super().__init__(f"{stage}: {message}" if stage else message)
        self.stage = stage
        self.checks = tuple(checks)  # torchbuild.results.Check results, so the report shows them


@contextmanager
def as_stage_failure(stage: str, *errors: type[Exception]) -> Iterator[None]:
    """Inside it, the given errors of a format module (one line that names the file) become StageFailed(stage, ...)."""
    try:
        yield
    except errors as exc:
        raise StageFailed(stage, str(exc)) from None


def one_of(choices: Iterable[object]) -> str:
    """'a, b or c' for error messages that name the valid choices."""
    items = [str(c) for c in choices]
    if not items:
        return "(none)"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def some_of(choices: Iterable[object], keep: int = 2) -> str:
    """Like one_of, but long lists keep their ends: 'a, b, ..., y or z (30 releases)'."""
    items = [str(c) for c in choices]
    if len(items) <= 2 * keep + 2:
        return one_of(items)
    return f"{', '.join(items[:keep])}, ..., {', '.join(items[-keep:-1])} or {items[-1]} ({len(items)} releases)"


def os_error(exc: OSError) -> str:
    """An OSError as a user reads it: what the system said, and the file it said it about."""
    what = exc.strerror or str(exc) or type(exc).__name__
    files = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{what}: {' -> '.join(files)}" if files else what
