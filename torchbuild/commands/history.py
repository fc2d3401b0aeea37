"""``pipeline.py history HISTORY_DIR [-o PAGE]``: the nightly page of a folder of nights (torchbuild/run/history.py,
drawn by history_html.py): what broke tonight, since when each cell has been red, and how its sizes and times moved."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from torchbuild.commands import values
from torchbuild.errors import UserError
from torchbuild.host.console import console, out
from torchbuild.host.files import unwritable, write_atomic
from torchbuild.run import history, history_html

DEFAULT_PAGE = Path("history.html")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "history",
        help="one page of a nightly's history: each cell night by night, since when it is red, its sizes and times",
    )
    parser.add_argument(
        "history_dir",
        type=values.path,
        metavar="HISTORY_DIR",
        help=f"a folder with a folder per night, each holding that night's {history.REPORT}; the nights are in the "
        "order of their folders' names",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=values.path,
        metavar="PAGE",
        default=DEFAULT_PAGE,
        help=f"the page to write; its folder is made where it is missing (default: {DEFAULT_PAGE})",
    )


def cmd_history(args: argparse.Namespace) -> int:
    page: Path = args.output
    if page.is_dir():
        raise UserError(f"-o {page} is a directory: give the path of the page to write (e.g. {page / DEFAULT_PAGE}).")
    problem = unwritable(page.parent if str(page.parent) else Path("."))
    if problem:
        raise UserError(f"-o {page}: its folder {page.parent} {problem}.")
    nights = history.read(args.history_dir)
    for night in nights.nights:
        if night.problem:
            console.print(f"warning: {night.report}: {night.problem}; the page shows the night {night.name} as "
                          "unreadable.", markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    page.parent.mkdir(parents=True, exist_ok=True)  # a full disk is the machine's fault: exit 1, as for a run
    write_atomic(page, history_html.page(nights))
    broke, still = nights.broke_tonight(), nights.still_red()
    out.print(
        f"wrote {page}: {history_html.counted(len(nights.nights), 'night')} ({nights.nights[0].name} to "
        f"{nights.tonight.name}), {history_html.counted(len(nights.cell_ids), 'cell')}; broke tonight: "
        f"{', '.join(broke) or 'none'}; "
        f"still red: {', '.join(still) or 'none'}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return 0
