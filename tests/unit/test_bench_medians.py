"""bench/main_job.py's medians of --repeat runs, as its table shows them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "main_job.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_main_job", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _stages(compile_seconds: float) -> list[dict[str, object]]:
    """report.json's stages of one run: torch.compile and ten other checks of 3-12 s."""
    others = [{"name": f"wheel: check {n}", "status": "passed", "duration": 3.0 + n} for n in range(10)]
    checks = [{"name": "wheel: torch.compile", "status": "passed", "duration": compile_seconds}, *others]
    return [{"stage": "smoke-wheel", "checks": checks}]


def test_a_check_heavy_in_one_run_only_shows_the_median_of_every_run() -> None:
    # the first of three warm runs compiled torch.compile (51.6 s), the other two read its result (2 s); the table
    # said 51.6 s: the median of the one run whose eight heaviest checks listed it
    bench = _bench()
    runs = [bench.Measured("linux-64", total_s=total, yardstick_s=30.0) for total in (60.0, 40.0, 38.0)]
    for run, seconds in zip(runs, (51.6, 2.1, 1.9), strict=True):
        run.checks = bench.check_times(_stages(seconds))
    shown = bench.medians(runs)
    assert "smoke-wheel: wheel: torch.compile" not in shown.checks  # 2.1 s: not among the eight heaviest
    assert list(shown.checks) == [f"smoke-wheel: wheel: check {n}" for n in range(9, 1, -1)]
    assert round(shown.ratio, 2) == 1.33 and shown.total_s == 40.0
