"""bench/corpus.py: the pairs come from the release data, the slices cover every pair once, and a night's results
(read from reports the pipeline's own writer made) become the summary that says which pairs failed and why."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.builders import torch_plan
from tests.conftest import ROOT
from torchbuild.knowledge import compat
from torchbuild.results import Check
from torchbuild.run import report
from torchbuild.run.records import CellRun, StageRecord


@pytest.fixture(scope="module")
def corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus", ROOT / "bench" / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_windows_release_from_1_8_with_each_of_its_pythons(corpus: ModuleType) -> None:
    pairs = corpus.pairs()
    data = compat.load()
    expected = [
        (r.version, py)
        for r in data.releases
        if compat.version_key(r.version) >= (1, 8) and "win-64" in r.platforms
        for py in r.platforms["win-64"].python
    ]
    assert [(p.torch, p.python) for p in pairs if p.platform == "win-64"] == expected
    keys = {p.key for p in pairs}
    assert {"1.8.0/3.7", "1.13.1/3.10", "2.0.0/3.8", "2.6.0/3.13", "2.14.1/3.14"} <= keys
    assert not [p for p in pairs if p.platform == "win-64" and compat.version_key(p.torch) < (1, 8)]
    assert [p.key for p in pairs[-2:]] == ["latest/3.11/linux-64", "latest/3.11/linux-64/cuda12.8"]


def test_seven_slices_hold_every_pair_once_each_old_and_new(corpus: ModuleType) -> None:
    pairs = corpus.pairs()
    slices = [corpus.shard(pairs, f"{i}/7") for i in range(1, 8)]
    assert sorted(p.key for s in slices for p in s) == sorted(p.key for p in pairs)
    for one in slices:
        majors = {p.torch.split(".")[0] for p in one if p.platform == "win-64"}
        assert majors == {"1", "2"}, "each night runs old and new releases"
        assert len(one) in (len(pairs) // 7, len(pairs) // 7 + 1)
    for bad in ("0/7", "8/7", "a/b", "3"):
        with pytest.raises(ValueError, match="--shard"):
            corpus.shard(pairs, bad)


def test_list_says_where_the_pairs_come_from() -> None:
    done = subprocess.run([sys.executable, "bench/corpus.py", "--list", "--shard", "2/7"], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("pairs from torchbuild/data/releases.yaml (win-64 from 1.8.0; source: its `source`)")
    assert lines[1] == "1.8.0/3.7"
    unknown = subprocess.run([sys.executable, "bench/corpus.py", "--only", "0.4.0/3.6"], cwd=ROOT,
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert unknown.returncode == 2 and "no pair 0.4.0/3.6; pairs: 1.8.0/3.6" in unknown.stderr


def _cell(workspace: Path, failed_stage: str | None, python: str = "3.12") -> dict[str, Any]:
    plan = torch_plan(platform="win-64", python=python, torch="2.13.0" if python != "3.6" else "1.8.0")
    records = []
    for stage in ("source", "build", "repair", "conda", "verify", "smoke-wheel", "smoke-conda", "publish"):
        if stage == failed_stage:
            records.append(StageRecord(stage, "failed", 50, f"{stage}: 1 of 63 checks failed:\n  TB102 ..."))
            break
        checks = []
        if stage == "repair":
            checks = [Check("one OpenMP runtime per process", "passed", "OpenMP: libiomp5md.dll (Intel's OpenMP, "
                            "imported by torch/lib/torch_cpu.dll)", code="P103")]  # fmt: skip
        message = "14/14 checks passed under Wine 8.0, CPython 3.12.9 embeddable" if stage.startswith("smoke") else ""
        if stage.startswith("smoke") and python == "3.6":
            message = "needs a win-64 host: no embeddable CPython 3.6 for Windows is pinned"
            records.append(StageRecord(stage, "skipped", 0, message))
            continue
        records.append(StageRecord(stage, "passed", 60, message, checks=checks, ran_on="under Wine 8.0"))
    report.write([CellRun(plan=plan, records=records)], workspace)
    cell: dict[str, Any] = json.loads((workspace / "report.json").read_text())["cells"][0]
    return cell


def test_the_summary_names_each_failed_pair_with_why(corpus: ModuleType, tmp_path: Path) -> None:
    Pair = corpus.Pair
    results = [
        {"pair": Pair("win-64", "2.13.0", "3.12"), "cell": _cell(tmp_path / "a", None), "seconds": 600,
         "workspace": tmp_path / "a"},
        {"pair": Pair("win-64", "2.13.0", "3.13"), "cell": _cell(tmp_path / "b", "verify"), "seconds": 300,
         "workspace": tmp_path / "b"},
        {"pair": Pair("win-64", "2.15.0", "3.12"), "not_offered": True},
        {"pair": Pair("win-64", "1.8.0", "3.6"), "cell": _cell(tmp_path / "c", None, "3.6"), "seconds": 100,
         "workspace": tmp_path / "c"},
    ]  # fmt: skip
    for result in results:
        result["row"] = corpus.row(result)
    omp = "imports libiomp5md.dll (Intel's OpenMP, imported by torch/lib/torch_cpu.dll); ships none"
    assert omp in results[0]["row"]
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(corpus.as_json(results, "3/7")))
    passed_row = corpus.as_json(results, "3/7")["pairs"][0]["row"]
    assert [passed_row[stage] for stage in corpus.STAGES] == ["ok 60s"] * len(corpus.STAGES)  # each stage kept
    done = subprocess.run([sys.executable, "scripts/ci_summary.py", "--corpus", str(path)], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("## Corpus, slice 3/7: 1 failed, 1 not offered here, 2 passed (of 4 pairs)\n")
    assert "| `1.8.0/3.6` | ✅ skipped (needs a win-64 host: no embeddable CPython 3.6 for Windows is pinned) |" in out
    assert "- `2.13.0/3.13`: FAILED in verify: verify: 1 of 63 checks failed: TB102 ..." in out
    assert "| `2.13.0/3.12` | ✅ passed under Wine 8.0: 28/28 checks passed | imports libiomp5md.dll" in out
    assert "| `2.15.0/3.12` | " in out and "the configured indexes offer no such wheel" in out


def _entries(corpus: ModuleType, tmp_path: Path, failed_stage: str | None) -> list[dict[str, Any]]:
    Pair = corpus.Pair
    results = [
        {"pair": Pair("win-64", "2.13.0", "3.12"), "cell": _cell(tmp_path / "a", failed_stage), "seconds": 600,
         "workspace": tmp_path / "a"},
        {"pair": Pair("win-64", "2.15.0", "3.12"), "not_offered": True},
    ]  # fmt: skip
    for result in results:
        result["row"] = corpus.row(result)
    entries: list[dict[str, Any]] = corpus.as_json(results, "")["pairs"]
    return entries


def _ledger(ledger: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/corpus.py", "--ledger", str(ledger)], cwd=ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_the_ledger_keeps_each_pairs_latest_result_across_runs(corpus: ModuleType, tmp_path: Path) -> None:
    ledger = tmp_path / "results" / "corpus.json"
    first = _entries(corpus, tmp_path / "first", "verify")
    corpus.record(ledger, first, "aaaa", "2026-11-20")
    corpus.record(ledger, [first[1]], "bbbb", "2026-11-21")  # 2.15.0/3.12 again, on another day
    rerun = _entries(corpus, tmp_path / "rerun", None)
    corpus.record(ledger, rerun[:1], "cccc", "2026-11-27")  # 2.13.0/3.12 passes now

    recorded = json.loads(ledger.read_text())["pairs"]
    assert [(e["key"], e["status"], e["commit"], e["ran"]) for e in recorded] == [
        ("2.13.0/3.12", "passed", "cccc", "2026-11-27"),
        ("2.15.0/3.12", "not offered here", "bbbb", "2026-11-21"),
    ]
    done = _ledger(ledger)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    total = len(corpus.pairs())
    assert lines[-1] == f"2 of {total} pairs on record: 1 not offered here, 1 passed (0 of the failures known input " \
        f"faults); {total - 2} not run"
    assert "| 1.8.0/3.6 | not run | - | - | - | - |" in lines
    row = next(line for line in lines if line.startswith("| 2.13.0/3.12 |"))
    assert row.startswith("| 2.13.0/3.12 | passed under Wine 8.0: 28/28 checks passed | imports libiomp5md.dll")
    assert row.endswith("| 600 | 2026-11-27 | cccc |")


def test_the_ledger_as_a_page_shows_failures_first_and_each_pairs_stages(corpus: ModuleType, tmp_path: Path) -> None:
    ledger = tmp_path / "corpus.json"
    failing = _entries(corpus, tmp_path / "first", "verify")[0]
    corpus.record(ledger, [{**failing, "why": "FAILED in verify: <TB114> & more"}], "aaaa", "2026-11-20")
    page = tmp_path / "corpus.html"
    done = subprocess.run([sys.executable, "bench/corpus.py", "--ledger", str(ledger), "--html", str(page)],
                          cwd=ROOT, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert html.index("<h2>Failures</h2>") < html.index('<table class="grid">')
    assert "FAILED in verify: &lt;TB114&gt; &amp; more" in html and "<TB114>" not in html
    assert f'<td class="failed" title="">{failing["row"]["verify"]}</td>' in html
    assert html.count('<td class="notrun"') >= 9 * (len(corpus.pairs()) - 1)  # the pairs not run: a pale row each


RECORDER = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("corpus", Path(sys.argv[1]))
corpus = importlib.util.module_from_spec(spec)
sys.modules["corpus"] = corpus
spec.loader.exec_module(corpus)
for pair in corpus.pairs()[int(sys.argv[3]) :: int(sys.argv[4])]:
    corpus.record(Path(sys.argv[2]), [{"key": pair.key, "status": "passed", "why": "passed"}], sys.argv[3], "today")
"""


def test_two_runs_recording_into_one_ledger_lose_nothing(corpus: ModuleType, tmp_path: Path) -> None:
    ledger = tmp_path / "corpus.json"
    runs = 4  # four shards side by side, each recording its pairs one by one as they end
    procs = [subprocess.Popen([sys.executable, "-c", RECORDER, str(ROOT / "bench" / "corpus.py"), str(ledger), str(i),
                               str(runs)], cwd=ROOT) for i in range(runs)]  # fmt: skip
    assert [proc.wait(timeout=120) for proc in procs] == [0] * runs
    recorded = json.loads(ledger.read_text())["pairs"]
    assert [e["key"] for e in recorded] == [p.key for p in corpus.pairs()], "every pair of every run, in order"
    assert {e["commit"] for e in recorded} == {str(i) for i in range(runs)}


def test_a_damaged_ledger_is_said_and_left_as_it_was(tmp_path: Path) -> None:
    ledger = tmp_path / "corpus.json"
    ledger.write_text('{"pairs": [')
    done = _ledger(ledger)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{ledger}: not a corpus ledger (" in done.stderr
    recording = subprocess.run([sys.executable, "bench/corpus.py", "--only", "2.15.0/3.12", "--record", str(ledger),
                                "--work", str(tmp_path / "work")], cwd=ROOT, capture_output=True, text=True,
                               check=False)  # fmt: skip
    assert recording.returncode == 2 and "not a corpus ledger" in recording.stderr
    assert not (tmp_path / "work").exists(), "nothing ran"
    assert ledger.read_text() == '{"pairs": ['


def test_the_openmp_scan_takes_each_release_once_with_its_newest_python_and_refuses_an_unknown_one() -> None:
    spec = importlib.util.spec_from_file_location("openmp_bench", ROOT / "bench" / "openmp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chosen = module.releases(["2.5.1", "1.8.0"])
    assert [(p.torch, p.python) for p in chosen] == [("1.8.0", "3.9"), ("2.5.1", "3.12")]
    assert len(module.releases([])) == len({p.torch for p in module.corpus.pairs() if p.platform == "win-64"})
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "openmp.py"), "--only", "9.9.9"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == "--only: 9.9.9 is not a release in torchbuild/data/releases.yaml"
