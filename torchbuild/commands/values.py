"""argparse types for flags that take a value: an empty value is refused, naming the flag (argparse adds
"argument --only:"). A CI job whose variable is unset passes ``--only ''``; taken as "no selection" it would build
the whole matrix, or as "no torch given" the latest release."""

from __future__ import annotations

import argparse
from pathlib import Path

EMPTY = "is empty: give a value (an unset variable gives an empty one)"


def text(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError(EMPTY)
    return value


def path(value: str) -> Path:
    """A path; Path('') would be '.', the working directory."""
    return Path(text(value))
