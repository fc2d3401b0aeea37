"""Benchmark: the main job against what a user does by hand at the very least, per platform, in one run.

For each cell (linux-64 and win-64 CPU, Python 3.11, the release `latest` pins to here), on the same wheel:
  - the pipeline: `python pipeline.py --platform P --cuda cpu --py 3.11 --force` in a fresh working directory with a
    local channel (the wheel cache stays warm), each stage's time from its report.json, and the total wall time;
  - the rerun with nothing changed (no --force): its wall time;
  - the heaviest checks, each stage's from report.json (a group of checks made in one go once, see
    results.timings): their seconds side by side;
  - the yardstick, the least a user does by hand with the wheels the cell ships (torch and each companion it
    ships): linux-64, a fresh `python -m venv` plus one `pip install` of them (with their dependencies, from the
    same indexes and pip cache); win-64, what also executes them under the same Wine (bench/windows_yardstick.py):
    `delvewheel repair --ignore-existing` of each, one after the other, with the same DLL providers (a companion's
    excluding the DLLs torch's repaired wheel holds, as a user would), a fresh venv, `pip install` of the repaired
    wheels and upstream's smoke script, each part's seconds shown; beside it the older yardstick, delvewheel alone;
  - the busy CPU seconds of the whole machine (/proc/stat) while each runs: Wine's processes are not the
    pipeline's children, so `time` would not count them.
Prints one table, both cells side by side, and the ratio total / yardstick for each. With --repeat N every figure is
the median of the N runs (each stage's, each check's, the total, the rerun, the yardstick) and the ratio the median
of the N runs' ratios (each measured in one run, on the same load).

    python bench/main_job.py                       # both cells
    python bench/main_job.py --platform win-64     # one
    python bench/main_job.py --repeat 3            # each cell three times, the medians shown (a busy machine
                                                   # moves single runs by 20%)
    python bench/main_job.py --repodata DIR        # verify solves against stored repodata (offline)
    python bench/main_job.py --cold-check-caches   # as a build of new content: the smoke's per-content caches
                                                   # (torch.compile's results, the C++ consumer's objects) emptied
                                                   # before each run, so each is compiled once in it
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # windows_yardstick.py beside this file, also where a test loads it

from windows_yardstick import measure as yardstick_under_wine  # noqa: E402

from torchbuild.config.options import RunOptions  # noqa: E402
from torchbuild.plan import STAGES  # noqa: E402
from torchbuild.results import Check, timings  # noqa: E402
from torchbuild.run.flow import pipeline  # noqa: E402
from torchbuild.stages.repair import windows  # noqa: E402
from torchbuild.stages.repair.dependent_pe import torch_dlls  # noqa: E402

PLATFORMS = ("linux-64", "win-64")
HEAVIEST = 8  # checks shown per cell
# what the smoke keeps per content of the environment (stages/smoke/venv.py): a new build's content finds them empty
CHECK_CACHES = ("smoke-compiled", "smoke-consumer")


@dataclass
class Measured:
    platform: str
    torch: str = ""
    stages: dict[str, tuple[str, float]] = field(default_factory=dict)  # stage -> (status, seconds)
    total_s: float = 0.0
    rerun_s: float = 0.0
    yardstick: str = ""
    yardstick_s: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # the yardstick's parts (win-64), in order
    cpu_s: float = 0.0  # busy CPU seconds of the machine while the pipeline ran
    yardstick_cpu_s: float = 0.0
    wheels: list[Path] = field(default_factory=list)  # the source wheels the cell ships, torch's first
    conda: str = ""  # the conda stage's own split (unpack, assemble) and the package's sha256
    checks: dict[str, float] = field(default_factory=dict)  # "stage: check" -> seconds, every one, heaviest first
    median_ratio: float | None = None  # of --repeat runs: the median of their ratios

    @property
    def ratio(self) -> float:
        return self.median_ratio if self.median_ratio is not None else self.total_s / self.yardstick_s

    @property
    def repair_only_s(self) -> float:
        """The older win-64 yardstick: delvewheel alone."""
        return self.parts.get("delvewheel repair", 0.0)


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds since boot (every process's, Wine's too): /proc/stat's first line."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _pipeline(work: Path, platform: str, *extra: str) -> float:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", platform, "--cuda", "cpu", "--py", "3.11",
            "--matrix", str(ROOT / "matrix.yaml"), "--channel", str(work / "channel"), *extra]  # fmt: skip
    # As a user's install runs it: with bytecode (pip writes it on install; a shell here may set
    # PYTHONDONTWRITEBYTECODE, which would make every rerun compile torchbuild's sources again, a second of it).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, errors="replace", check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"the {platform} main job failed (exit {result.returncode}); its output is above")
    return elapsed


def _venv_pip_install(wheels: list[Path], work: Path) -> float:
    started = time.perf_counter()
    venv = work / "yardstick-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *map(str, wheels)], check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - started


def _delvewheel_each(wheels: list[Path], repaired_torch: Path, work: Path) -> tuple[float, list[Path]]:
    """delvewheel repair of each wheel with the providers the repair stage finds; a companion's excludes the DLLs
    torch's repaired wheel holds (it loads them from torch). Only the repairs are timed. The seconds, and the
    wheels it made, torch's first."""
    from torchbuild import plan as plan_mod
    from torchbuild.config import matrix
    from torchbuild.config.matrix import Cell

    cell = Cell(platform="win-64", cuda="cpu", python="3.11", torch=wheels[0].name.split("-")[1].split("+")[0])
    plan = plan_mod.resolve(cell, matrix.load(ROOT / "matrix.yaml"))
    seconds = 0.0
    for wheel in wheels:
        beside = torch_dlls(repaired_torch) if wheel != wheels[0] else {}
        located = windows.needs(plan, wheel, RunOptions().cache_dir, work / "providers.log", beside=beside).located
        providers = sorted({hit.path.parent for hit in located})
        argv = [sys.executable, "-m", "delvewheel", "repair", "--ignore-existing", "-w", str(work / "plain"),
                "--add-path", os.pathsep.join(map(str, providers))]  # fmt: skip
        if beside:
            argv += ["--exclude", os.pathsep.join(sorted(beside))]
        started = time.perf_counter()
        subprocess.run([*argv, str(wheel)], check=True, capture_output=True)
        seconds += time.perf_counter() - started
    made = {w.name.split("-")[0]: w for w in (work / "plain").glob("*.whl")}
    return seconds, [made[w.name.split("-")[0]] for w in wheels]


def measure(platform: str, repodata: Path | None = None, cold_checks: bool = False) -> Measured:
    measured = Measured(platform)
    with tempfile.TemporaryDirectory(prefix=f"bench-main-{platform}-") as tmp:
        work = Path(tmp)
        stored = ("--repodata", str(repodata)) if repodata else ()
        if cold_checks:
            for name in CHECK_CACHES:
                shutil.rmtree(RunOptions().cache_dir / name, ignore_errors=True)
        cpu = busy_cpu_s()
        measured.total_s = _pipeline(work, platform, "--force", *stored)
        measured.cpu_s = busy_cpu_s() - cpu
        (cell,) = json.loads((work / "build" / "report.json").read_text())["cells"]
        measured.torch = cell["torch"]
        measured.stages = {s["stage"]: (s["status"], float(s["duration"])) for s in cell["stages"]}
        measured.checks = check_times(cell["stages"])
        conda = next(s for s in cell["stages"] if s["stage"] == "conda")
        split = re.search(r"\((unpack [^)]*)\)", conda["message"])
        package = conda["outputs"]["conda_package"]
        measured.conda = (
            f"{split[1] if split else conda['message']}; {Path(package['path']).name} sha256 {package['sha256']}"
        )
        artifacts = cell["artifacts"]
        shipped = ["source_wheel", *sorted(k for k in artifacts if k.startswith("source_wheel["))]
        measured.wheels = [Path(artifacts[k]["path"]) for k in shipped]
        measured.rerun_s = _pipeline(work, platform, *stored)
        names = " + ".join(w.name.split("-")[0] for w in measured.wheels)
        cpu = busy_cpu_s()
        if platform == "linux-64":
            measured.yardstick = f"python -m venv + pip install of {names}"
            measured.yardstick_s = _venv_pip_install(measured.wheels, work)
        else:
            measured.yardstick = (f"delvewheel repair of {names}, one after the other, then under Wine a fresh venv, "
                                  "pip install of what it made and upstream's smoke script")  # fmt: skip
            repaired = Path(artifacts["repaired_wheel"]["path"])
            seconds, made = _delvewheel_each(measured.wheels, repaired, work)
            measured.parts = yardstick_under_wine(made, seconds, RunOptions().cache_dir)
            measured.yardstick_s = sum(measured.parts.values())
        measured.yardstick_cpu_s = busy_cpu_s() - cpu
    return measured


def medians(runs: list[Measured]) -> Measured:
    """Each figure the median of ``runs`` (of one cell); the ratio the median of the runs' own ratios."""
    first = runs[0]
    stages = {
        stage: (first.stages[stage][0], statistics.median(m.stages.get(stage, ("", 0.0))[1] for m in runs))
        for stage in first.stages
    }
    names = dict.fromkeys(name for m in runs for name in m.checks)
    # every run keeps every check's time: a check heavy in one run only (torch.compile where that run compiled and
    # the others read its result) shows the median of all runs, not of that one
    found = {name: statistics.median(m.checks.get(name, 0.0) for m in runs) for name in names}
    checks = dict(sorted(found.items(), key=lambda item: item[1], reverse=True)[:HEAVIEST])
    parts = {part: statistics.median(m.parts.get(part, 0.0) for m in runs) for part in first.parts}
    return Measured(
        first.platform, first.torch, stages, statistics.median(m.total_s for m in runs),
        statistics.median(m.rerun_s for m in runs), first.yardstick, statistics.median(m.yardstick_s for m in runs),
        parts, statistics.median(m.cpu_s for m in runs), statistics.median(m.yardstick_cpu_s for m in runs),
        first.wheels, first.conda, checks, statistics.median(m.ratio for m in runs),
    )


def check_times(stages: list[dict[str, Any]]) -> dict[str, float]:
    """Every timed check of a cell's stages (report.json's), as "stage: check" -> seconds, the heaviest first."""
    rows = []
    for stage in stages:
        checks = [Check(**c) for c in stage.get("checks") or []]
        rows += [(seconds, f"{stage['stage']}: {what}") for seconds, what in timings(checks)]
    return {what: seconds for seconds, what in sorted(rows, reverse=True)}


def show(results: list[Measured]) -> None:
    header = f"{'':28}" + "".join(f"{m.platform + ' ' + m.torch:>26}" for m in results)
    print(header)
    for stage in STAGES:
        cells = []
        for m in results:
            status, seconds = m.stages.get(stage, ("-", 0.0))
            cells.append(f"{status + ' ' + format(seconds, '.1f') + ' s':>26}")
        print(f"{stage:28}" + "".join(cells))
    print(f"{'total (wall)':28}" + "".join(f"{m.total_s:>24.1f} s" for m in results))
    print(f"{'rerun, nothing changed':28}" + "".join(f"{m.rerun_s:>24.1f} s" for m in results))
    print(f"{'yardstick':28}" + "".join(f"{m.yardstick_s:>24.1f} s" for m in results))
    for part in dict.fromkeys(part for m in results for part in m.parts):
        print(f"{'  ' + part:28}" + "".join(f"{_seconds(m.parts.get(part)):>26}" for m in results))
    print(f"{'ratio total / yardstick':28}" + "".join(f"{m.ratio:>26.2f}" for m in results))
    if any(m.parts for m in results):
        older = (f"{m.total_s / m.repair_only_s:>26.2f}" if m.repair_only_s else f"{'-':>26}" for m in results)
        print(f"{'ratio / delvewheel alone':28}" + "".join(older))
    print(f"{'busy CPU s, pipeline':28}" + "".join(f"{m.cpu_s:>24.0f} s" for m in results))
    print(f"{'busy CPU s, yardstick':28}" + "".join(f"{m.yardstick_cpu_s:>24.0f} s" for m in results))
    names = list(dict.fromkeys(name for m in results for name in m.checks))
    if names:
        print("heaviest checks (seconds; a group made in one go counts once):")
        width = max(len(name) for name in names)
        for name in names:
            print(f"  {name:{width}}" + "".join(f"{_seconds(m.checks.get(name)):>14}" for m in results))
    for m in results:
        print(f"yardstick of {m.platform}: {m.yardstick}")
        print(f"conda stage of {m.platform}: {m.conda}")
    for declared in pipeline():
        if declared.beside and results:
            print(f"{declared.name} ran beside {' and '.join(declared.beside)}: their times overlap; the total is wall "
                  "time")  # fmt: skip


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=PLATFORMS, action="append", help="a cell's platform (default: both)")
    parser.add_argument("--repeat", type=int, default=1, help="measure each cell N times; show the medians")
    parser.add_argument("--repodata", type=Path, help="stored conda repodata for verify's solve (pipeline.py's option)")
    parser.add_argument("--cold-check-caches", action="store_true",
                        help="empty the smoke's per-content caches before each run, as a build of new content finds "
                             "them")  # fmt: skip
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be 1 or more (got {args.repeat})")
    chosen = []
    print(f"load average at the start: {_load()}", flush=True)
    caches = "emptied before each run (as for a build of new content)" if args.cold_check_caches else "kept"
    print(f"the smoke's per-content caches ({', '.join(CHECK_CACHES)}): {caches}", flush=True)
    for platform in args.platform or PLATFORMS:
        runs = [measure(platform, args.repodata, args.cold_check_caches) for _ in range(args.repeat)]
        if args.repeat > 1:
            ratios = ", ".join(f"{m.ratio:.2f}" for m in runs)
            print(f"{platform}: ratios of {args.repeat} runs {ratios}; the medians are shown", flush=True)
        chosen.append(medians(runs))
    show(chosen)
    print(f"load average at the end: {_load()} (timings on a busy machine stretch; the ratios less)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
