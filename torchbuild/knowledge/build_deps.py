"""torchbuild/data/build_deps.yaml, parsed once: the build dependencies of a cell (MKL, MAGMA, ...) with URL and
sha256, the folder inside the archive that is their root, the variables they give the build, and the cells they are
for (torchbuild/host/downloads.py fetches them)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles
from torchbuild.knowledge.compat import Rule

ARCHIVES = (".7z", ".zip", ".whl", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")


class DependencyError(UserError):
    pass


@dataclass(frozen=True, kw_only=True)
class Dependency:
    name: str
    url: str
    sha256: str
    root: str = ""  # the folder inside the archive that is the dependency's root ("" = the archive's top)
    env: Mapping[str, str] = field(default_factory=dict)
    when: Mapping[str, Any] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        # The URL's path unquoted, not url2pathname: on Windows that makes "https://host/a/b.whl" a drive path.
        return PurePosixPath(urllib.parse.unquote(urllib.parse.urlsplit(self.url).path)).name


def _parse_table(raw: Mapping[str, Any]) -> tuple[Dependency, ...]:
    return parse(raw, "torchbuild/data/build_deps.yaml")


def _table() -> tuple[Dependency, ...]:
    return datafiles.table("build_deps.yaml", _parse_table)


def parse(raw: Mapping[str, Any], where: str) -> tuple[Dependency, ...]:
    deps = []
    for row in raw.get("dependencies") or []:
        missing = [k for k in ("name", "url", "sha256") if not row.get(k)]
        if missing:
            raise DependencyError(f"{where}: dependency {row.get('name', '?')!r} lacks {', '.join(missing)}.")
        if not re.fullmatch(r"[0-9a-f]{64}", str(row["sha256"])):
            raise DependencyError(f"{where}: {row['name']}: sha256 must be 64 lowercase hex digits.")
        if not str(row["url"]).lower().endswith(ARCHIVES):
            raise DependencyError(f"{where}: {row['name']}: the URL must end in one of {', '.join(ARCHIVES)}.")
        deps.append(
            Dependency(
                name=str(row["name"]),
                url=str(row["url"]),
                sha256=str(row["sha256"]),
                root=str(row.get("root", "")),
                env={str(k): str(v) for k, v in (row.get("env") or {}).items()},
                when=dict(row.get("when") or {}),
            )
        )
    return tuple(deps)


def declared(platform: str, torch: str, cuda: str) -> tuple[Dependency, ...]:
    """The dependencies whose ``when`` matches the cell (same conditions as packaging.yaml's rules)."""
    return tuple(d for d in _table() if Rule(value=d.name, when=d.when).applies(platform, torch, cuda))
