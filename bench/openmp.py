"""The OpenMP runtimes of the corpus's win-64 releases, read from PyPI's wheels without running the stages: for each
torch release, the newest Python of its corpus pairs that the indexes offer, the runtimes the libraries and extensions
of torch's wheel import (the closure's P103), those of the torchvision and torchaudio that pair with it
(companions.yaml), and the verdict of verify's TB114 on one process of ``import torch, torchvision, torchaudio``
(platforms/closure.py ``joint_openmp``: one runtime, counted by name across the packages).

    python bench/openmp.py                      # every release (downloads each torch wheel once: ~200 MB each)
    python bench/openmp.py --only 2.5.1 --only 2.14.1
    python bench/openmp.py --json out.json      # the rows as JSON too
    python bench/openmp.py --cache DIR          # keep the wheels in DIR (default: each release's are removed after it)

The wheels are PyPI's as uploaded (torch's before its repair: the runtimes a repair vendors do not change which ones
are imported). A release whose wheel the indexes do not offer here says so. The libraries of declared requirements
(torch 2.3.x's mkl, whose mkl_intel_thread.1.dll loads Intel's OpenMP by name) are not read here; the repair's and
verify's closure checks follow them (stages/requirement_libraries.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchbuild.config import matrix  # noqa: E402
from torchbuild.errors import UserError  # noqa: E402
from torchbuild.host import downloads  # noqa: E402
from torchbuild.knowledge import compat  # noqa: E402
from torchbuild.plan import Plan, resolve  # noqa: E402
from torchbuild.platforms.closure import OpenMpRuntime, joint_openmp  # noqa: E402
from torchbuild.platforms.windows import pe  # noqa: E402
from torchbuild.stages.source import fetch  # noqa: E402


def _corpus() -> Any:
    """bench/corpus.py (the pairs, the pin step's question), loaded from its file: bench is no package."""
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "bench" / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


corpus = _corpus()


def releases(only: Sequence[str]) -> list[Any]:
    """One pair (corpus.Pair) per win-64 release of the corpus: its newest Python (the pairs are oldest Python
    first)."""
    newest: dict[str, Any] = {}
    for pair in corpus.pairs():
        if pair.platform == "win-64" and (not only or pair.torch in only):
            newest[pair.torch] = pair
    return list(newest.values())


def _runtimes(found: Sequence[OpenMpRuntime]) -> str:
    return "; ".join(f"{r.name} ({', '.join(sorted({Path(i).name for i in r.importers}))})" for r in found) or "none"


def scan(plan: Plan, cache: Path, log: Path) -> dict[str, Any]:
    """Each package's runtimes and the joint verdict for one release's cell."""
    wheels = {"torch": fetch(plan, cache, log, version=plan.torch).path}
    unread = {}
    for companion in (c for c in plan.companions if c.release and c.wheel):
        try:
            wheels[companion.name] = downloads.pinned_wheel(
                f"{companion.name}=={companion.release}", companion.wheel, companion.sha256, plan.pip_target, cache,
                log, "torchbuild/data/companions.yaml",
            )  # fmt: skip
        except UserError as exc:  # not offered here (a capped release): the others are still read
            unread[companion.name] = f"{companion.release} not fetched: {str(exc).splitlines()[0][:120]}"
    found = {name: pe.check_wheel(path, python=plan.python).openmp_runtimes() for name, path in wheels.items()}
    problem, _line = joint_openmp(found)
    return {
        "packages": {**{name: _runtimes(runtimes) for name, runtimes in found.items()}, **unread},
        "wheels": {name: path.name for name, path in wheels.items()},
        "verdict": f"{len({r.name for rs in found.values() for r in rs})} runtimes" if problem else "one process, one",
        "problem": problem,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="a torch release (repeatable)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cache", type=Path, default=None, help="keep the wheels here")
    args = parser.parse_args(argv)
    known = {r.version for r in compat.load().releases}
    unknown = [v for v in args.only if v not in known]
    if unknown:
        print(f"--only: {', '.join(unknown)} is not a release in torchbuild/data/releases.yaml", file=sys.stderr)
        return 2
    rows = []
    for pair in releases(args.only):
        cell = matrix.Cell(platform="win-64", cuda="cpu", python=pair.python, torch=pair.torch)
        row: dict[str, Any] = {"torch": pair.torch, "python": pair.python}
        if not corpus.offered(pair):
            row["verdict"] = corpus.NOT_OFFERED
        else:
            cache = args.cache or Path(tempfile.mkdtemp(prefix="openmp-"))
            try:
                row |= scan(resolve(cell, matrix.load(ROOT / "matrix.yaml")), cache, cache / "pip.log")
            except UserError as exc:
                row["verdict"] = f"not read: {str(exc).splitlines()[0]}"
            finally:
                if args.cache is None:
                    shutil.rmtree(cache, ignore_errors=True)
        rows.append(row)
        packages = row.get("packages", {})
        print(f"{pair.torch:8} py{pair.python:5} {row['verdict']:16} " + " | ".join(
            f"{name}: {text}" for name, text in packages.items()), flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    two = [r["torch"] for r in rows if r.get("problem")]
    print(f"{len(rows)} releases; more than one OpenMP runtime in one process: {', '.join(two) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
