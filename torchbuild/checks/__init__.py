"""Static checks of built artifacts, read back from disk.

Every check has a code: conda-verify's C11xx where it checks the same thing (users who know conda-verify
recognise them; conda-verify itself is not on the package index here), and torchbuild's own TBxxx for what
conda-verify does not check: TB1xx conda package, TB2xx wheel, TB3xx solve.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from torchbuild.results import Check

# code -> what passing means (the Check's name). Each module that makes checks registers its codes once, with
# ``define`` (or ``conda_archive.package_check``), where the check is written.
CODES: dict[str, str] = {}


def define(code: str, title: str) -> str:
    """Register a check's code and title; returns the code. A code means one thing everywhere."""
    known = CODES.setdefault(code, title)
    if known != title:
        raise ValueError(f"check code {code} is registered twice: {known!r} and {title!r}")
    return code


SHOWN = 5  # problems named in one check's message; the rest are counted


def result(code: str, file: Path | str, problems: Sequence[str], note: str = "") -> Check:
    """A passed Check when ``problems`` is empty (with ``note`` as its message), else a failed one naming them."""
    if not problems:
        return Check(name=CODES[code], status="passed", message=note, code=code, file=str(file))
    message = "; ".join(problems[:SHOWN])
    if len(problems) > SHOWN:
        message += f" (and {len(problems) - SHOWN} more)"
    return Check(name=CODES[code], status="failed", message=message, code=code, file=str(file))


def skipped(code: str, file: Path | str, reason: str) -> Check:
    return Check(name=CODES[code], status="skipped", message=reason, code=code, file=str(file))


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == "failed"]


def summary(failed: Sequence[Check]) -> str:
    """One line per failed check: code, file, what is wrong."""
    return "\n".join(f"  {c.code} {c.file}: {c.name}: {c.message}" for c in failed)
