"""The corpus: PyPI's real torch win_amd64 wheels through every stage, the smoke test under Wine included, plus the
linux-64 CPU cell and a linux-64 CUDA cell (PyPI's unlabelled CUDA 12.8 wheel, its CUDA libraries from its nvidia-*
requirements); one table of what happened.

Each (release, Python) pair runs as a user runs it, `python pipeline.py --platform win-64 --cuda cpu --py X --torch
Y`, in a workspace of its own (its build/, channel/ and reports), one after the other (the machine has 2 cores).
The pairs span the oldest release PyPI has a win_amd64 wheel for that a Python >= 3.8 can install (1.7.1) to the
newest this machine's pip may take, and every Python from 3.8 to 3.13. The table: release, Python, each stage's
status and time, the wheel's and the conda package's size, the DLLs the repair vendored, the longest installed
path (verify's TB102), and the smoke result with where it ran. A pair that fails is shown with its stage's first
line; ``KNOWN_INPUT_FAULTS`` says which failures are a fault of that input rather than of the pipeline.

    python bench/corpus.py                      # every pair (an hour or more on 2 cores; wheels cached after)
    python bench/corpus.py --only 2.14.1/3.12   # one pair
    python bench/corpus.py --keep DIR           # keep the workspaces in DIR (default: removed after each pair)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPODATA = ROOT.parent / "shared" / "data" / "repodata"
STAGES = ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")  # torchbuild.plan's
SMOKE_STAGES = ("smoke-wheel", "smoke-conda")
SHORT = {"passed": "ok", "failed": "FAIL", "skipped": "skip", "cached": "cached", "not run": "-"}


@dataclass(frozen=True)
class Pair:
    platform: str
    torch: str
    python: str
    why: str
    cuda: str = "cpu"

    @property
    def key(self) -> str:
        return (
            f"{self.torch}/{self.python}"
            + ("" if self.platform == "win-64" else f"/{self.platform}")
            + ("" if self.cuda == "cpu" else f"/cuda{self.cuda}")
        )


PAIRS = (
    Pair("win-64", "1.7.1", "3.8", "oldest win_amd64 wheel a Python >= 3.8 installs (1.7.0's cp38 is tagged cp38m)"),
    Pair("win-64", "1.10.2", "3.9", "imports pkg_resources (setuptools<70)"),
    Pair("win-64", "1.13.1", "3.10", "last 1.x"),
    Pair("win-64", "2.0.1", "3.11", "first 2.x"),
    Pair("win-64", "2.2.2", "3.12", "first release for 3.12; numpy<2"),
    Pair("win-64", "2.3.1", "3.12", "MKL left to its `mkl` requirement (delvewheel excludes it; Library\\bin)"),
    Pair("win-64", "2.4.1", "3.8", "last release for 3.8"),
    Pair("win-64", "2.5.1", "3.11", "the repair benchmark's wheel"),
    Pair("win-64", "2.14.1", "3.12", "MSVC 14.42, vcruntime140_threads"),
    Pair("win-64", "2.14.1", "3.13", "2.14.1 on 3.13 (numpy 2.1.3)"),
    Pair("win-64", "latest", "3.13", "the newest release the indexes offer, whatever it is on the day"),
    Pair("linux-64", "latest", "3.11", "the linux-64 CPU cell (the main job)"),
    Pair("linux-64", "latest", "3.11", "CUDA 12.8: PyPI's unlabelled wheel, nvidia-*-cu12 requirements", cuda="12.8"),
)
# Failures that are the input's fault, not the pipeline's: pair key -> the explanation. None known today.
KNOWN_INPUT_FAULTS: dict[str, str] = {}


def run_pair(pair: Pair, workspace: Path) -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", pair.platform, "--cuda", pair.cuda, "--py",
            pair.python, "--matrix", str(ROOT / "matrix.yaml"), "--compression-level", "1"]  # fmt: skip
    if pair.torch != "latest":
        argv += ["--torch", pair.torch]
    if REPODATA.is_dir():
        argv += ["--repodata", str(REPODATA)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, env=env, check=False)
    took = time.monotonic() - started
    (workspace / "pipeline.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    report = workspace / "build" / "report.json"
    if not report.is_file():
        return {"pair": pair, "error": (proc.stdout + proc.stderr).strip().splitlines()[-1:], "seconds": took}
    cell = json.loads(report.read_text(encoding="utf-8"))["cells"][0]
    return {"pair": pair, "cell": cell, "seconds": took, "workspace": workspace}


def _stage(cell: dict[str, Any], name: str) -> dict[str, Any]:
    return next((s for s in cell["stages"] if s["stage"] == name), {"status": "not run", "duration": 0, "message": ""})


def _size(cell: dict[str, Any], name: str) -> str:
    artifact = cell["artifacts"].get(name)
    return f"{artifact['size'] / 1e6:.0f} MB" if artifact else "-"


def _vendored(workspace: Path, cell: dict[str, Any]) -> str:
    report = workspace / "build" / cell["cell_id"] / "repair" / "repair.json"
    if not report.is_file():
        return "-"
    vendored = json.loads(report.read_text(encoding="utf-8")).get("vendored", [])
    return ", ".join(Path(v["path"]).name for v in vendored) or "none"


def _longest(cell: dict[str, Any]) -> str:
    check = next((c for c in _stage(cell, "verify").get("checks", []) if c["code"] == "TB102"), None)
    if check is None:
        return "-"
    message = str(check["message"])
    return message.split(";")[0].split(":")[0] if message else str(check["status"])


def row(result: dict[str, Any]) -> list[str]:
    pair: Pair = result["pair"]
    if "cell" not in result:
        return [pair.torch, pair.python, *(["-"] * (len(STAGES) + 4)), f"no report: {result['error']}"]
    cell = result["cell"]
    stages = [f"{SHORT.get(s['status'], s['status'])} {s['duration']:.0f}s" for s in (_stage(cell, n) for n in STAGES)]
    smokes = [_stage(cell, name) for name in SMOKE_STAGES]
    failed = next((s for s in cell["stages"] if s["status"] == "failed"), None)
    if failed is not None:
        first = failed["message"].splitlines()[0][:300]
        fault = KNOWN_INPUT_FAULTS.get(pair.key)
        verdict = f"FAILED in {failed['stage']}: {first}" + (f" (input's fault: {fault})" if fault else "")
    else:
        statuses = {s["status"] for s in smokes}
        verdict = f"{'/'.join(sorted(statuses))} {smokes[0].get('ran_on', '')}".strip()
        if statuses == {"passed"}:
            counts = [s["message"].split(" checks passed")[0].split("/") for s in smokes]
            verdict += f": {sum(int(a) for a, _ in counts)}/{sum(int(b) for _, b in counts)} checks passed"
    release = cell["torch"] if pair.platform == "win-64" else f"{cell['torch']} (linux-64)"
    release += "" if pair.cuda == "cpu" else f" CUDA {pair.cuda}"
    return [release, pair.python, *stages, _size(cell, "repaired_wheel"), _size(cell, "conda_package"),
            _vendored(result["workspace"], cell), _longest(cell), verdict]  # fmt: skip


def table(results: list[dict[str, Any]]) -> str:
    header = ["release", "Python", *STAGES, "wheel", "conda", "DLLs vendored", "longest installed path", "smoke"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r["row"]) + " |" for r in results]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a pair as RELEASE/PYTHON (repeatable)")
    parser.add_argument("--keep", type=Path, help="keep each pair's workspace under this directory")
    args = parser.parse_args(argv)
    pairs = [p for p in PAIRS if not args.only or p.key in args.only]
    if not pairs:
        parser.error(f"no pair matches {args.only}; pairs: {', '.join(p.key for p in PAIRS)}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="corpus-"))
    results = []
    for pair in pairs:
        workspace = base / pair.key.replace("/", "-py")
        shutil.rmtree(workspace, ignore_errors=True)
        workspace.mkdir(parents=True)
        print(f"== {pair.key} ({pair.why}) ...", file=sys.stderr, flush=True)
        result = run_pair(pair, workspace)
        result["row"] = row(result)  # before the workspace goes: it reads repair.json
        results.append(result)
        print("   " + " | ".join(result["row"]) + f" [{result['seconds']:.0f} s]", file=sys.stderr, flush=True)
        if args.keep is None:
            for heavy in ("build", "channel"):
                shutil.rmtree(workspace / heavy, ignore_errors=True)
    print(table(results))
    if args.keep is None:
        print(f"(logs of each pair: {base}/*/pipeline.log)", file=sys.stderr)
    failed = [r for r in results if "cell" not in r or not r["cell"]["ok"]]
    unexplained = [r for r in failed if r["pair"].key not in KNOWN_INPUT_FAULTS]
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
