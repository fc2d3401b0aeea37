"""Benchmark: the main job against what a user does by hand at the very least, per platform, in one run.

For each cell (linux-64 and win-64 CPU, Python 3.11, the release `latest` pins to here), on the same wheel:
  - the pipeline: `python pipeline.py --platform P --cuda cpu --py 3.11 --force` in a fresh working directory with a
    local channel (the wheel cache stays warm), each stage's time from its report.json, and the total wall time;
  - the rerun with nothing changed (no --force): its wall time;
  - the heaviest checks, each stage's from report.json (a group of checks made in one go once, see
    results.timings): their seconds side by side;
  - the yardstick: linux-64, a fresh `python -m venv` plus `pip install` of the same wheel (with its dependencies,
    from the same indexes and pip cache); win-64, `delvewheel repair --ignore-existing` alone on the same wheel with
    the same DLL providers.
Prints one table, both cells side by side, and the ratio total / yardstick for each.

    python bench/main_job.py                       # both cells
    python bench/main_job.py --platform win-64     # one
    python bench/main_job.py --repeat 3            # each cell three times, the median run shown (a busy machine
                                                   # moves single runs by 20%)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchbuild.config.options import RunOptions  # noqa: E402
from torchbuild.host.platform import host_platform  # noqa: E402
from torchbuild.plan import STAGES  # noqa: E402
from torchbuild.results import Check, timings  # noqa: E402
from torchbuild.run.runner import pipeline  # noqa: E402
from torchbuild.stages.repair import windows  # noqa: E402

PLATFORMS = ("linux-64", "win-64")
HEAVIEST = 8  # checks shown per cell


@dataclass
class Measured:
    platform: str
    torch: str = ""
    stages: dict[str, tuple[str, float]] = field(default_factory=dict)  # stage -> (status, seconds)
    total_s: float = 0.0
    rerun_s: float = 0.0
    yardstick: str = ""
    yardstick_s: float = 0.0
    wheel: Path | None = None
    conda: str = ""  # the conda stage's own split (unpack, assemble) and the package's sha256
    checks: dict[str, float] = field(default_factory=dict)  # "stage: check" -> seconds, its heaviest


def _pipeline(work: Path, platform: str, *extra: str) -> float:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", platform, "--cuda", "cpu", "--py", "3.11",
            "--matrix", str(ROOT / "matrix.yaml"), "--channel", str(work / "channel"), *extra]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"the {platform} main job failed (exit {result.returncode}); its output is above")
    return elapsed


def _venv_pip_install(wheel: Path, work: Path) -> float:
    started = time.perf_counter()
    venv = work / "yardstick-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - started


def _delvewheel_alone(wheel: Path, work: Path) -> float:
    from torchbuild import plan as plan_mod
    from torchbuild.config import matrix
    from torchbuild.config.matrix import Cell

    cell = Cell(platform="win-64", cuda="cpu", python="3.11", torch=wheel.name.split("-")[1].split("+")[0])
    plan = plan_mod.resolve(cell, matrix.load(ROOT / "matrix.yaml"))
    located = windows.needs(plan, wheel, RunOptions().cache_dir, work / "providers.log").located
    providers = sorted({hit.path.parent for hit in located})
    argv = [sys.executable, "-m", "delvewheel", "repair", "--ignore-existing", "-w", str(work / "plain"),
            "--add-path", os.pathsep.join(map(str, providers)), str(wheel)]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def measure(platform: str) -> Measured:
    measured = Measured(platform)
    with tempfile.TemporaryDirectory(prefix=f"bench-main-{platform}-") as tmp:
        work = Path(tmp)
        measured.total_s = _pipeline(work, platform, "--force")
        (cell,) = json.loads((work / "build" / "report.json").read_text())["cells"]
        measured.torch = cell["torch"]
        measured.stages = {s["stage"]: (s["status"], float(s["duration"])) for s in cell["stages"]}
        measured.checks = heaviest(cell["stages"])
        conda = next(s for s in cell["stages"] if s["stage"] == "conda")
        split = re.search(r"\((unpack [^)]*)\)", conda["message"])
        package = conda["outputs"]["conda_package"]
        measured.conda = (
            f"{split[1] if split else conda['message']}; {Path(package['path']).name} sha256 {package['sha256']}"
        )
        wheel = Path(cell["artifacts"]["source_wheel"]["path"])
        measured.rerun_s = _pipeline(work, platform)
        if platform == "linux-64":
            measured.yardstick = "python -m venv + pip install of the wheel"
            measured.yardstick_s = _venv_pip_install(wheel, work)
        else:
            measured.yardstick = "delvewheel repair alone"
            measured.yardstick_s = _delvewheel_alone(wheel, work)
    return measured


def heaviest(stages: list[dict[str, Any]]) -> dict[str, float]:
    """The HEAVIEST timed checks of a cell's stages (report.json's), as "stage: check" -> seconds."""
    rows = []
    for stage in stages:
        checks = [Check(**c) for c in stage.get("checks") or []]
        rows += [(seconds, f"{stage['stage']}: {what}") for seconds, what in timings(checks)]
    return {what: seconds for seconds, what in sorted(rows, reverse=True)[:HEAVIEST]}


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
    print(f"{'ratio total / yardstick':28}" + "".join(f"{m.total_s / m.yardstick_s:>26.2f}" for m in results))
    names = list(dict.fromkeys(name for m in results for name in m.checks))
    if names:
        print("heaviest checks (seconds; a group made in one go counts once):")
        width = max(len(name) for name in names)
        for name in names:
            print(f"  {name:{width}}" + "".join(f"{_seconds(m.checks.get(name)):>14}" for m in results))
    for m in results:
        print(f"yardstick of {m.platform}: {m.yardstick}")
        print(f"conda stage of {m.platform}: {m.conda}")
    host = host_platform()
    for declared in pipeline():
        together = [m.platform for m in results if declared.beside and m.platform == host]
        if together:
            print(f"{declared.name} ran beside {' and '.join(declared.beside)} on {', '.join(together)} (this host's "
                  "platform): their times overlap; the total is wall time")  # fmt: skip


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=PLATFORMS, action="append", help="a cell's platform (default: both)")
    parser.add_argument("--repeat", type=int, default=1, help="measure each cell N times; show the median (by ratio)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be 1 or more (got {args.repeat})")
    chosen = []
    for platform in args.platform or PLATFORMS:
        runs = sorted((measure(platform) for _ in range(args.repeat)), key=lambda m: m.total_s / m.yardstick_s)
        if args.repeat > 1:
            ratios = ", ".join(f"{m.total_s / m.yardstick_s:.2f}" for m in runs)
            print(f"{platform}: ratios of {args.repeat} runs {ratios}; the median run is shown", flush=True)
        chosen.append(runs[len(runs) // 2])
    show(chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
