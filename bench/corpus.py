"""The corpus: every Windows release of torch PyPI has, from 1.8.0 to the newest the package indexes here offer, with
each Python it shipped for, through every stage (the smoke under Wine included), plus the linux-64 CPU cell and a
linux-64 CUDA 12.8 cell (PyPI's unlabelled wheel, its CUDA libraries from its nvidia-* requirements); one table of
what happened.

The pairs are data: torchbuild/data/releases.yaml lists every release with the Pythons of its win_amd64 wheels,
read from PyPI's project JSON (its ``source`` says how). A pair whose wheel the configured indexes do not offer here
(a release above pip's constraints, a Python whose wheels PyPI does not have after all) is listed as "not offered
here", not run and not failed: the pin step's own question, ``pin/pin.newest_available``, decides. Each pair runs as a
user runs it, ``python pipeline.py --platform win-64 --cuda cpu --py X --torch Y``, in a workspace of its own, one
after the other. The table: release, Python, each stage's status and time, the sizes, the DLLs the repair vendored,
the OpenMP runtimes the wheel ships and its libraries import (the closure's P103/E103), the longest installed path
(TB102), and the verdict: the smoke result with where it ran, or the failed stage's first line.
``KNOWN_INPUT_FAULTS`` says which failures are a fault of that input rather than of the pipeline.

    python bench/corpus.py                       # every pair (hours; wheels cached after the first run)
    python bench/corpus.py --shard 3/7           # the 3rd of 7 slices (pairs 3, 10, 17, ...: old and new mixed)
    python bench/corpus.py --only 2.14.1/3.12    # one pair (repeatable)
    python bench/corpus.py --list                # the pairs and where they come from; nothing runs
    python bench/corpus.py --json out.json       # the results as JSON too, rewritten after each pair (the nightly's
                                                 # summary reads it)
    python bench/corpus.py --work DIR            # the pairs' workspaces (logs) in DIR (default: a temporary one)
    python bench/corpus.py --keep                # keep each pair's build/ and channel/ (default: removed after it,
                                                 # its report.json kept beside pipeline.log)
    python bench/corpus.py --shard 3/7 --record bench/results/corpus.json
                                                 # merge each pair's result into the ledger, with the commit and day
    python bench/corpus.py --ledger bench/results/corpus.json [--html corpus.html]
                                                 # every pair's latest result on record, and the pairs not yet run
                                                 # (--html: also as one page, drawn as report.html is)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchbuild.host import files, locks  # noqa: E402
from torchbuild.knowledge import compat  # noqa: E402
from torchbuild.platforms.closure import openmp_family  # noqa: E402

REPODATA = ROOT.parent / "shared" / "data" / "repodata"
FIRST = "1.8.0"
STAGES = ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish")  # torchbuild.plan's
SMOKE_STAGES = ("smoke-wheel", "smoke-conda")
SHORT = {"passed": "ok", "failed": "FAIL", "skipped": "skip", "cached": "cached", "not run": "-"}
NOT_OFFERED = "not offered here"
# Failures that are the input's fault, not the pipeline's: pair key -> the explanation.
LIBOMP_240 = (
    "PyPI's torch 2.4.0 win_amd64 wheels for Python 3.10-3.12 import LLVM's libomp140.x86_64.dll (torch_cpu.dll, "
    "fbgemm.dll) beside vcomp140.dll and ship no copy; no redistributable wheel the index offers has it (msvc-runtime "
    "14.51: vcomp140.dll only), so the repair cannot make the wheel self-contained and says so; the cp38 and cp39 "
    "wheels import vcomp140.dll only, and 2.4.1 imports libiomp5md.dll instead (companions.yaml torch_openmp)"
)
KNOWN_INPUT_FAULTS: dict[str, str] = {
    **{f"2.4.0/{py}": LIBOMP_240 for py in ("3.10", "3.11", "3.12")},
}


@dataclass(frozen=True)
class Pair:
    platform: str
    torch: str
    python: str
    cuda: str = "cpu"

    @property
    def key(self) -> str:
        return (
            f"{self.torch}/{self.python}"
            + ("" if self.platform == "win-64" else f"/{self.platform}")
            + ("" if self.cuda == "cpu" else f"/cuda{self.cuda}")
        )


def pairs(data: compat.Compat | None = None) -> list[Pair]:
    """Every (release, Python) of win-64 in the data from FIRST on, oldest first, then the linux-64 CPU and CUDA 12.8
    cells."""
    data = data or compat.load()
    found = [
        Pair("win-64", release.version, python)
        for release in data.releases
        if compat.version_key(release.version) >= compat.version_key(FIRST) and "win-64" in release.platforms
        for python in release.platforms["win-64"].python
    ]
    return [*found, Pair("linux-64", "latest", "3.11"), Pair("linux-64", "latest", "3.11", cuda="12.8")]


def shard(selected: Sequence[Pair], spec: str) -> list[Pair]:
    """The i-th of n slices ("i/n", 1-based), every n-th pair from the i-th: each slice spans old and new releases,
    and the n slices together hold every pair once."""
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n with whole numbers, e.g. 3/7 (got {spec!r})") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard {spec}: i must be 1 to n ({count})")
    return list(selected[index - 1 :: count])


def offered(pair: Pair) -> bool:
    """Whether the configured indexes offer this pair's wheel, as the pin step asks (pip's constraints included)."""
    if pair.torch == "latest":
        return True
    from torchbuild import plan as plan_mod
    from torchbuild.config import matrix
    from torchbuild.errors import UserError
    from torchbuild.pin.pin import newest_available

    cell = matrix.Cell(platform=pair.platform, cuda=pair.cuda, python=pair.python, torch=pair.torch)
    try:
        resolved = plan_mod.resolve(cell, matrix.load(ROOT / "matrix.yaml"))
    except UserError:
        return True  # the pipeline refuses the cell itself, with its message: the pair's result says so
    return newest_available(resolved, [pair.torch]) == pair.torch


def run_pair(pair: Pair, workspace: Path) -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", pair.platform, "--cuda", pair.cuda, "--py",
            pair.python, "--matrix", str(ROOT / "matrix.yaml"), "--compression-level", "1"]  # fmt: skip
    if pair.torch != "latest":
        argv += ["--torch", pair.torch]
    if REPODATA.is_dir():
        argv += ["--repodata", str(REPODATA)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, errors="replace", env=env, check=False)
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


def _check(cell: dict[str, Any], stage: str, codes: Sequence[str]) -> dict[str, Any] | None:
    return next((c for c in _stage(cell, stage).get("checks", []) if c["code"] in codes), None)


def openmp(workspace: Path, cell: dict[str, Any]) -> str:
    """The OpenMP runtimes the repaired wheel ships and those its libraries import, with what its declared
    requirements' libraries bring in turn (the repair's closure check; upstream's recorded set, where accepted, as the
    check says it)."""
    wheel = cell["artifacts"].get("repaired_wheel")
    shipped: list[str] = []
    if wheel and Path(wheel["path"]).is_file():
        with zipfile.ZipFile(wheel["path"]) as archive:
            shipped = sorted({n.rsplit("/", 1)[-1] for n in archive.namelist() if openmp_family(n.rsplit("/", 1)[-1])})
    check = _check(cell, "repair", ("P103", "E103"))
    said = str(check["message"]) if check else "imports -"
    said = f"imports {said.removeprefix('OpenMP: ')}" if said.startswith("OpenMP: ") else said
    verdict = "" if check is None or check["status"] == "passed" else "FAIL: "
    return f"{verdict}{said}; ships {', '.join(shipped) or 'none'}"


def _longest(cell: dict[str, Any]) -> str:
    check = _check(cell, "verify", ("TB102",))
    if check is None:
        return "-"
    message = str(check["message"])
    return message.split(" characters installed")[0].removeprefix("longest path ") if message else check["status"]


def verdict(result: dict[str, Any]) -> tuple[str, str]:
    """(status, why): passed | failed | not offered here | no report, and what the table says of it."""
    pair: Pair = result["pair"]
    if result.get("not_offered"):
        return NOT_OFFERED, "the configured indexes offer no such wheel (pip's constraints included)"
    if "cell" not in result:
        return "no report", f"no report: {' '.join(result['error'])}"
    cell = result["cell"]
    failed = next((s for s in cell["stages"] if s["status"] == "failed"), None)
    if failed is not None:
        lines = failed["message"].splitlines()
        # "N of M checks failed (...):" names the failed checks on the next lines: the first of them says why
        first = (" ".join(line.strip() for line in lines[:2]) if lines[0].endswith(":") else lines[0])[:300]
        fault = KNOWN_INPUT_FAULTS.get(pair.key)
        return "failed", f"FAILED in {failed['stage']}: {first}" + (f" (input's fault: {fault})" if fault else "")
    smokes = [_stage(cell, name) for name in SMOKE_STAGES]
    statuses = {s["status"] for s in smokes}
    why = f"{'/'.join(sorted(statuses))} {smokes[0].get('ran_on', '')}".strip()
    skipped = next((s["message"] for s in smokes if s["status"] == "skipped" and s["message"]), "")
    if skipped:  # a pair whose smoke could not run here says why (no embeddable CPython for Python 3.6, ...)
        why += f" ({skipped.splitlines()[0][:200]})"
    if statuses == {"passed"}:
        counts = [s["message"].split(" checks passed")[0].split("/") for s in smokes]
        why += f": {sum(int(a) for a, _ in counts)}/{sum(int(b) for _, b in counts)} checks passed"
    return "passed", why


def row(result: dict[str, Any]) -> list[str]:
    pair: Pair = result["pair"]
    why = verdict(result)[1]
    if "cell" not in result:
        return [pair.torch, pair.python, *(["-"] * (len(HEADER) - 3)), why]
    cell = result["cell"]
    stages = [f"{SHORT.get(s['status'], s['status'])} {s['duration']:.0f}s" for s in (_stage(cell, n) for n in STAGES)]
    release = cell["torch"] if pair.platform == "win-64" else f"{cell['torch']} (linux-64)"
    release += "" if pair.cuda == "cpu" else f" CUDA {pair.cuda}"
    workspace = result["workspace"]
    return [release, pair.python, *stages, _size(cell, "repaired_wheel"), _size(cell, "conda_package"),
            _vendored(workspace, cell), openmp(workspace, cell), _longest(cell), why]  # fmt: skip


HEADER = ["release", "Python", *STAGES, "wheel size", "conda size", "DLLs vendored", "OpenMP", "longest installed path",
          "result"]


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r["row"]) + " |" for r in results]
    return "\n".join(lines)


def as_json(results: list[dict[str, Any]], spec: str) -> dict[str, Any]:
    entries = []
    for result in results:
        status, why = verdict(result)
        cells = dict(zip(HEADER, result["row"], strict=True))
        entries.append({**asdict(result["pair"]), "key": result["pair"].key, "status": status, "why": why,
                        "seconds": round(result.get("seconds", 0.0)), "row": cells})  # fmt: skip
    return {"shard": spec, "header": HEADER, "pairs": entries}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    files.write_atomic(path, json.dumps(data, indent=1) + "\n")


LEDGER_ABOUT = (
    "Each corpus pair's latest result: `python bench/corpus.py ... --record <this file>` merges the pairs it runs, "
    "with the torchbuild commit and the day; `--ledger <this file>` prints it with the pairs not yet run."
)


def read_ledger(path: Path) -> dict[str, dict[str, Any]]:
    """pair key -> its latest recorded result; an absent ledger is empty, an unreadable one a ValueError."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {entry["key"]: entry for entry in data["pairs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a corpus ledger ({exc})") from None


def record(path: Path, entries: Sequence[dict[str, Any]], commit: str, day: str) -> None:
    """Merge these results into the ledger at path (a pair run again replaces its entry), in the corpus's order. Two
    runs recording into one ledger (two shards side by side) take turns: neither loses the other's pairs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locks.held(path.with_name(path.name + ".lock"), busy="another corpus run keeps the ledger", wait_s=600):
        merged = read_ledger(path)
        merged.update({entry["key"]: {**entry, "commit": commit, "ran": day} for entry in entries})
        rank = {p.key: i for i, p in enumerate(pairs())}
        ordered = sorted(merged.values(), key=lambda entry: (rank.get(entry["key"], len(rank)), entry["key"]))
        _write_json(path, {"about": LEDGER_ABOUT, "pairs": ordered})


def ledger_table(ledger: dict[str, dict[str, Any]], every: Sequence[Pair]) -> str:
    """Every pair with its latest result on record (or "not run"), then the counts."""
    lines = ["| pair | result | OpenMP | s | ran | commit |", "|---|---|---|---|---|---|"]
    counts: dict[str, int] = {}
    known_faults = 0
    for pair in every:
        entry = ledger.get(pair.key)
        if entry is None:
            counts["not run"] = counts.get("not run", 0) + 1
            lines.append(f"| {pair.key} | not run | - | - | - | - |")
            continue
        status = entry["status"]
        counts[status] = counts.get(status, 0) + 1
        known_faults += status == "failed" and pair.key in KNOWN_INPUT_FAULTS
        why = entry["why"].replace("|", "/")
        result = why if why.startswith(status) else f"{status}: {why}"
        openmp_said = str(entry.get("row", {}).get("OpenMP", "-")).replace("|", "/")
        lines.append(f"| {pair.key} | {result} | {openmp_said} | {entry.get('seconds', '-')} | {entry.get('ran', '-')} "
                     f"| {entry.get('commit', '-')} |")  # fmt: skip
    said = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()) if status != "not run")
    lines += ["", f"{len(every) - counts.get('not run', 0)} of {len(every)} pairs on record: {said or 'none'}"
              f" ({known_faults} of the failures known input faults); {counts.get('not run', 0)} not run"]  # fmt: skip
    return "\n".join(lines)


def ledger_html(ledger: dict[str, dict[str, Any]], every: Sequence[Pair]) -> str:
    """The ledger as one page, drawn as report.html is (torchbuild/run/report_html.py): the failures first with why,
    then every pair's stages coloured by status."""
    from html import escape

    from torchbuild.run import report_html as page

    status_of = {short: status for status, short in SHORT.items()}
    rows, failed = [], []
    for pair in every:
        entry = ledger.get(pair.key)
        if entry is None:
            rows.append((pair.key, "", [page.Box("not run", "·", "not run")] * (len(STAGES) + 1)))
            continue
        said = {stage: str(entry.get("row", {}).get(stage, "-")) for stage in STAGES}
        boxes = [page.Box(status_of.get(text.split(" ")[0], "not run"), text) for text in said.values()]
        verdict = entry["status"] if entry["status"] in page.CLASSES else "skipped"  # not offered here
        rows.append((pair.key, "", [*boxes, page.Box(verdict, entry["status"], entry["why"])]))
        if entry["status"] == "failed":
            failed.append((pair.key, entry["why"], entry.get("ran", "-"), entry.get("commit", "-")))
    counts = ledger_table(ledger, every).splitlines()[-1]
    parts = [f"<p>{escape(counts)}</p>"]
    if failed:
        parts += ["<h2>Failures</h2>", page.table(("pair", "why", "ran", "commit"), failed)]
    parts += ["<h2>Pairs</h2>", page.grid("pair", [*STAGES, "result"], rows)]
    return page.document("torchbuild corpus", parts)


def _commit() -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, errors="replace", check=False)  # fmt: skip
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="a pair as RELEASE/PYTHON (repeatable)")
    parser.add_argument("--shard", help="run the i-th of n slices of the pairs, e.g. 3/7")
    parser.add_argument("--list", action="store_true", help="print the pairs and their source; run nothing")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--work", type=Path, help="the pairs' workspaces go here (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep each pair's build/ and channel/")
    parser.add_argument("--record", type=Path, help="merge each pair's result into this ledger (JSON)")
    parser.add_argument("--ledger", type=Path, help="print this ledger's results for every pair; run nothing")
    parser.add_argument("--html", type=Path, help="with --ledger: also write it as one page (report.html's look)")
    args = parser.parse_args(argv)
    selected = pairs()
    try:
        if args.record:
            read_ledger(args.record)  # a damaged ledger stops the run before the hours of pairs, not after them
        recorded = read_ledger(args.ledger) if args.ledger else {}
    except ValueError as exc:
        parser.error(str(exc))
    if args.ledger:
        print(ledger_table(recorded, selected))
        if args.html:
            files.write_atomic(args.html, ledger_html(recorded, selected))
        return 0
    commit, day = _commit(), datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    if args.only:
        unknown = sorted(set(args.only) - {p.key for p in selected})
        if unknown:
            parser.error(f"no pair {', '.join(unknown)}; pairs: {', '.join(p.key for p in selected)}")
        selected = [p for p in selected if p.key in args.only]
    if args.shard:
        try:
            selected = shard(selected, args.shard)
        except ValueError as exc:
            parser.error(str(exc))
    if args.list:
        print(f"{len(selected)} pairs from torchbuild/data/releases.yaml (win-64 from {FIRST}; source: its `source`)")
        print("\n".join(p.key for p in selected))
        return 0
    base = args.work or Path(tempfile.mkdtemp(prefix="corpus-"))
    results = []
    for pair in selected:
        print(f"== {pair.key} ...", file=sys.stderr, flush=True)
        if not offered(pair):
            result: dict[str, Any] = {"pair": pair, "not_offered": True}
        else:
            workspace = base / pair.key.replace("/", "-py")
            shutil.rmtree(workspace, ignore_errors=True)
            workspace.mkdir(parents=True)
            result = run_pair(pair, workspace)
        result["row"] = row(result)  # before the workspace goes: it reads repair.json and the wheel
        results.append(result)
        print("   " + " | ".join(result["row"]) + f" [{result.get('seconds', 0):.0f} s]", file=sys.stderr, flush=True)
        if not args.keep and "workspace" in result:
            kept = result["workspace"] / "build" / "report.json"  # small, and every check's message is in it
            if kept.is_file():
                shutil.copy2(kept, result["workspace"] / "report.json")
            for heavy in ("build", "channel"):
                shutil.rmtree(result["workspace"] / heavy, ignore_errors=True)
        if args.json:  # after every pair: a run stopped halfway keeps the pairs it finished
            _write_json(args.json, as_json(results, args.shard or "all"))
        if args.record:
            record(args.record, as_json(results[-1:], "")["pairs"], commit, day)
    print(table(results))
    print(f"(logs and reports of each pair: {base}/*/pipeline.log, report.json)", file=sys.stderr)
    failed = [r for r in results if verdict(r)[0] in ("failed", "no report")]
    return 1 if [r for r in failed if r["pair"].key not in KNOWN_INPUT_FAULTS] else 0


if __name__ == "__main__":
    sys.exit(main())
