"""``pipeline.py sbom ARTIFACT``: the SBOM a repaired wheel or conda package carries (torchbuild/wheel/sbom.py), as a
table a person reads: each component with its version, sha256, where it came from, license and signer."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from torchbuild.commands import values
from torchbuild.conda.archive import PackageUnreadable, read_package
from torchbuild.config import nesting
from torchbuild.errors import UserError
from torchbuild.host import archives
from torchbuild.host.console import out
from torchbuild.wheel import sbom

KINDS = (".whl", ".conda", ".tar.bz2")
SHA_SHOWN = 12


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("sbom", help="print the SBOM of a repaired wheel or conda package as a table")
    parser.add_argument("artifact", type=values.path, metavar="ARTIFACT", help="a .whl, .conda or .tar.bz2 file")


def read_document(path: Path) -> tuple[str, str]:
    """The SBOM text of ``path`` and where in it it was; UserError naming what is wrong."""
    if not path.name.endswith(KINDS):
        raise UserError(f"{path} is not a wheel or conda package; valid: {', '.join(KINDS)} files.")
    if not path.is_file():
        raise UserError(f"{path}: no such file.")
    if path.name.endswith(".whl"):
        try:
            with archives.open_zip(path) as archive:
                members = [n for n in archive.namelist() if n.endswith(f".dist-info/sboms/{sbom.FILE_NAME}")]
                if not members:
                    others = [n for n in archive.namelist() if "/sboms/" in n]
                    also = f" (it has {', '.join(others)})" if others else ""
                    raise UserError(f"{path} carries no {sbom.FILE_NAME}{also}: it was not repaired by torchbuild.")
                return archive.read(members[0]).decode("utf-8"), members[0]
        except zipfile.BadZipFile as exc:
            raise UserError(f"{path} is not a readable wheel: {exc}") from None
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: {members[0]} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    try:
        package = read_package(path, payload=False)
    except PackageUnreadable as exc:
        raise UserError(str(exc)) from None
    member = f"info/{sbom.FILE_NAME}"
    if member not in package.info:
        raise UserError(f"{path} carries no {member}: it was not made by torchbuild.")
    try:
        return package.info[member].decode("utf-8"), member
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: {member} is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None


def _short(origin: str) -> str:
    """A URL as its host and file name; the document has it in full."""
    if "://" not in origin:
        return origin
    host, _, rest = origin.split("://", 1)[1].partition("/")
    return f"{host}/…/{rest.rsplit('/', 1)[-1]}" if rest else host


def cmd_sbom(args: argparse.Namespace) -> int:
    path: Path = args.artifact
    text, member = read_document(path)
    try:
        document = nesting.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: {member} is not JSON: {exc}") from None
    table = Table(title=f"{path.name}: {member}", title_justify="left")
    for column in ("component", "version", "sha256", "from", "license", "signer"):
        table.add_column(column, overflow="fold")
    try:
        rows = sbom.rows(document)
        made = str((document.get("metadata") or {}).get("timestamp", ""))
        spec = str(document.get("specVersion", "?"))
    except (sbom.ShapeError, AttributeError) as exc:
        raise UserError(f"{path}: {member}: {exc}") from None
    for row in rows:
        cells = (row.component, row.version, row.sha256[:SHA_SHOWN], _short(row.origin), row.license, row.signer)
        table.add_row(*(escape(v) for v in cells))
    out.print(table)  # piped: each row on one line (grep finds a DLL's row); console.LOG_WIDTH
    out.print(f"{len(rows) - 1} vendored files; CycloneDX {spec}, dated {made}")
    return 0
