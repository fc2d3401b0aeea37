"""Turns ``python pipeline.py matrix --github`` into the nightly's job matrices (no second copy of the matrix).

    python pipeline.py matrix --github > matrix.json
    python scripts/gha_matrix.py matrix.json --cells "win-64-cuda12.8-*,linux-64-cpu-py3.11" >> "$GITHUB_OUTPUT"

Prints ``build=<json>`` (the cells selected by --cells: comma- or space-separated shell patterns over cell ids,
empty = every cell), ``smoke=<json>`` (its CUDA cells) and ``has-smoke=true|false``. A pattern that matches no
cell is an error that names the valid ids (exit 2).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The keys of an include entry that the nightly's jobs read (matrix.<key>).
KEYS = ("cell", "platform", "cuda", "python", "torch", "runs-on", "conda-builder")


class Invalid(Exception):
    pass


def entries(payload: Any, source: str) -> list[dict[str, str]]:
    include = payload.get("include") if isinstance(payload, dict) else None
    if not isinstance(include, list) or not include:
        raise Invalid(f"{source}: expected {{\"include\": [...]}} with at least one cell, as `matrix --github` prints")
    for entry in include:
        missing = [k for k in KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise Invalid(f"{source}: an include entry lacks {', '.join(missing)}: {entry}")
    return include


def select(cells: Sequence[dict[str, str]], patterns: str) -> list[dict[str, str]]:
    wanted = [p for p in re.split(r"[,\s]+", patterns.strip()) if p]
    if not wanted:
        return list(cells)
    ids = [c["cell"] for c in cells]
    unmatched = [p for p in wanted if not fnmatch.filter(ids, p)]
    if unmatched:
        raise Invalid(f"--cells {', '.join(unmatched)} matches no cell; the cells are: {', '.join(ids)}")
    return [c for c in cells if any(fnmatch.fnmatchcase(c["cell"], p) for p in wanted)]


def outputs(cells: Sequence[dict[str, str]]) -> dict[str, str]:
    smoke = [c for c in cells if c["cuda"] != "cpu"]
    return {
        "build": json.dumps({"include": list(cells)}, separators=(",", ":"), sort_keys=True),
        "smoke": json.dumps({"include": smoke}, separators=(",", ":"), sort_keys=True),
        "has-smoke": "true" if smoke else "false",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("matrix_json", type=Path, help="what `python pipeline.py matrix --github` printed")
    parser.add_argument("--cells", default="", help="shell patterns over cell ids, comma-separated (empty: all)")
    args = parser.parse_args(argv)
    try:
        try:
            payload = json.loads(args.matrix_json.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise Invalid(f"{args.matrix_json}: {exc}") from None
        chosen = select(entries(payload, str(args.matrix_json)), args.cells)
    except Invalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key, value in outputs(chosen).items():
        print(f"{key}={value}")
    print(f"{len(chosen)} cells, {sum(c['cuda'] != 'cpu' for c in chosen)} with a GPU smoke job", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
