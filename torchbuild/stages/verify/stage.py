"""verify: static checks of the cell's artifacts, read back from disk, and a solve against real repodata.

- the conda package: conda-verify's checks (C11xx) and torchbuild's (TB10x), that it is the Plan's package, and
  (win-64) that it works in the environment it is installed into (TB105-TB107, checks/conda_environment.py) with
  one OpenMP runtime (P103: the declared requirements' libraries followed, upstream's recorded set passed only for
  upstream's own wheel, which ``source_info`` says);
- the wheel: RECORD, tags, member paths (TB20x); every console script names a module it carries, but those the
  Plan records as upstream's faults (TB208, wheel/scripts.py);
- (win-64) the loader check (TB205 wheel, TB108 conda layout, checks/loader.py): every DLL and extension loaded
  with LoadLibraryExW under Wine, so a DLL that would not load stops the cell before smoke and publish;
- the solve (TB301): ``pytorch`` with the cell's Python, against a temporary channel holding only the new package
  plus the real repodata of the cell's era (conda-forge; `main` of 2018 for Python 3.5/3.6 win-64 cells), with the
  virtual packages of a typical machine, must pick this very build.
- each package built beside torch (``Plan.dependents``: torchvision, torchaudio; dependents.py beside this module):
  its package's checks, TB111 (the Plan's package, pinning the exact pytorch build) and TB112 (its DLLs resolve
  beside torch's package), and TB302: ``pytorch`` and the companions solved together against a channel of them all
  must pick every one of them.

Every check goes into the StageResult and into ``checks.json`` in the stage directory; any failed check fails the
stage with a message naming each failed check's code and file. Each check carries its seconds (report.json, ``-v``):
its own where it is made alone, else those of the group made in one go (one read of the wheel, one Wine process),
which ``timed_with`` names; the solve runs beside the reading of the package, so their times overlap.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from torchbuild.conda.archive import TB100, CondaArchive, PackageUnreadable, read_package
from torchbuild.conda.checks.package import run_checks
from torchbuild.errors import StageFailed
from torchbuild.host.files import write_atomic
from torchbuild.plan import Plan
from torchbuild.platforms.closure import ClosureReport, OpenMpRuntime, UpstreamOpenMp
from torchbuild.platforms.windows.pe import PeInfo
from torchbuild.results import (
    Artifact,
    Check,
    StageResult,
    Status,
    define,
    failures,
    result,
    sha256_of,
    skipped,
    summary,
    timed,
    timed_together,
    with_time,
)
from torchbuild.stages import Context, Stage, companion_artifacts, package_artifact, requirement_libraries
from torchbuild.stages.verify import dependents
from torchbuild.stages.verify.environment import environment_checks, environment_closure
from torchbuild.stages.verify.loader import loader_checks
from torchbuild.stages.verify.solve import TB301, solve_check
from torchbuild.wheel.checks import TB207, check_wheel
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import RepairReport
from torchbuild.wheel.scripts import script_check

NAME = "verify"
TB104 = define("TB104", "the package is the one the Plan names")


def plan_problems(pkg: CondaArchive, plan: Plan, artifact: Artifact) -> list[str]:
    """TB104: the file is the one the conda stage recorded, and its index.json is the Plan's package."""
    problems: list[str] = []
    fmt = "tar.bz2" if pkg.path.name.endswith(".tar.bz2") else "conda"
    expected_name = plan.root.conda.archives[fmt]
    if pkg.path.name != expected_name:
        problems.append(f"file name {pkg.path.name}, the Plan's is {expected_name}")
    size = pkg.path.stat().st_size
    if artifact.size and size != artifact.size:
        problems.append(f"{size} bytes on disk, the conda stage recorded {artifact.size}")
    if artifact.sha256 and sha256_of(pkg.path) != artifact.sha256:
        problems.append("sha256 on disk differs from what the conda stage recorded")
    conda = plan.root.conda
    wanted = {
        "name": conda.name,
        "version": conda.version,
        "build": conda.build_string,
        "build_number": conda.build_number,
        "subdir": plan.conda.subdir,
    }
    for key, value in wanted.items():
        if pkg.index.get(key) != value:
            problems.append(f"index.json {key} is {pkg.index.get(key)!r}, the Plan's is {value!r}")
    for key, specs in (("depends", conda.depends), ("constrains", conda.constrains)):
        have = pkg.index.get(key) or []
        missing = [s for s in specs if s not in have]
        if missing:
            problems.append(f"index.json {key} lacks the Plan's {', '.join(missing)}")
    return problems


def conda_checks(
    artifact: Artifact,
    plan: Plan,
    repodata: Path | None,
    work: Path,
    report: RepairReport | None = None,
    follow: Callable[[ClosureReport[PeInfo]], ClosureReport[PeInfo]] | None = None,
    cache_dir: Path | None = None,
) -> tuple[list[Check], tuple[OpenMpRuntime, ...] | None]:
    """The package's checks, and the OpenMP runtimes its binaries import (None where not read: not a win-64
    package, or unreadable) for the check of the process it shares with the companions; ``follow``: what the
    OpenMP count adds of the declared requirements' libraries (requirement_libraries.follow); ``cache_dir``: where a
    solve against the live channel caches their repodata."""
    # The solve (rattler, in a process of its own) runs while this one reads the package back.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        solved = pool.submit(timed, lambda: solve_check(artifact.path, plan, repodata, work, None, cache_dir))
        started = time.perf_counter()
        try:
            pkg = read_package(artifact.path)
        except PackageUnreadable as exc:
            reason = "the package could not be read (TB100)"
            return [result(TB100, artifact.path, [str(exc)]), skipped(TB301, artifact.path, reason)], None
        read = time.perf_counter() - started  # TB100's time: the package read back whole, its payload hashed
        started = time.perf_counter()
        closure = environment_closure(pkg, plan) if pkg.is_windows else None
        closure = follow(closure) if closure is not None and follow is not None else closure
        in_environment = with_time(environment_checks(pkg, plan, report, closure), time.perf_counter() - started,
                                   "the package in its environment (its DLL closure read)")  # fmt: skip
        as_planned = f"{plan.root.conda.filename} as planned"
        checks = [
            replace(result(TB100, pkg.path, [], f"{pkg.format}, {len(pkg.files()):,} payload files"), duration=read),
            *run_checks(pkg),
            timed(lambda: result(TB104, pkg.path, plan_problems(pkg, plan, artifact), as_planned)),
            *in_environment,
            solved.result(),
        ]
        return checks, closure.openmp_runtimes() if closure else None


def _write(checks: Sequence[Check], path: Path) -> None:
    write_atomic(path, json.dumps([c.to_dict() for c in checks], indent=2) + "\n")


def _source(ctx: Context) -> SourceInfo | None:
    info = ctx.inputs.get("source_info")
    return SourceInfo.read(info.path) if info is not None else None


def _upstream(ctx: Context) -> UpstreamOpenMp | None:
    return requirement_libraries.upstream_openmp(ctx.plan, _source(ctx))


def _follower(ctx: Context) -> Callable[[ClosureReport[PeInfo]], ClosureReport[PeInfo]]:
    """What P103 of torch's package adds: the declared requirements' libraries, and upstream's recorded set."""
    source, log = _source(ctx), ctx.stage_dir("logs") / f"{NAME}.log"
    return lambda closure: requirement_libraries.follow(closure, ctx.plan, source, ctx.options.cache_dir, log, NAME)


def run(ctx: Context) -> StageResult:
    plan = ctx.plan
    work = ctx.stage_dir(NAME)
    conda = ctx.inputs.get("conda_package")
    wheel = ctx.inputs.get("repaired_wheel")
    if conda is None and wheel is None:
        raise StageFailed(NAME, "nothing to verify: no 'conda_package' or 'repaired_wheel' from the earlier stages")
    checks: list[Check] = []
    repair = ctx.inputs.get("repair_report")
    repaired = RepairReport.read(repair.path) if repair else None
    torch_openmp = None
    options = ctx.options
    if conda is not None:
        follow = _follower(ctx)
        found, torch_openmp = conda_checks(conda, plan, options.repodata, work, repaired, follow, options.cache_dir)
        checks += found
    built = {
        p.name: a for p in plan.dependents if (a := ctx.inputs.get(package_artifact("conda_package", p)))
    }
    if built:
        upstream, openmp = _upstream(ctx), torch_openmp
        checks += timed_together("the companions' packages",
                                 lambda: dependents.dependent_checks(plan, built, conda, openmp, upstream))  # fmt: skip
        if conda is not None:
            paths, torch = {name: artifact.path for name, artifact in built.items()}, conda.path
            checks.append(timed(lambda: solve_check(torch, plan, options.repodata, work, paths, options.cache_dir)))
    if wheel is not None:
        dist = plan.root.conda.stem
        checks += timed_together("the wheel read once", lambda: check_wheel(wheel.path, plan.root.wheel, dist))
        checks.append(timed(lambda: script_check(wheel.path, [rule.value for rule in plan.broken_scripts])))
    log = ctx.stage_dir("logs") / "verify-loadcheck.log"
    companions = {name: artifact.path for name, artifact in built.items()}
    wheel_path, conda_path = (wheel.path if wheel else None), (conda.path if conda else None)

    def loading() -> list[Check]:
        return loader_checks(plan, wheel_path, conda_path, work, options.cache_dir, log, companions)

    checks += timed_together("the loader check (one Wine process)", loading)
    report = work / "checks.json"
    _write(checks, report)

    failed = failures(checks)
    counts = {s: sum(c.status == s for c in checks) for s in ("passed", "failed", "skipped", "unverified")}
    line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    budget = next((c for c in checks if c.code == TB207 and c.status != "skipped"), None)
    if budget is not None:
        line += f"; wheel path budget: {budget.message}"
    if failed:
        raise StageFailed(NAME, f"{len(failed)} of {len(checks)} checks failed ({report}):\n{summary(failed)}", checks)
    not_run = [c for c in checks if c.status == "unverified"]
    if not_run:  # the package is published, and every report says which check did not run, and what runs it
        line += "".join(f"\n  {c.code} {c.message}" for c in not_run)
    status: Status = "unverified" if not_run else "passed"
    return StageResult(status=status, outputs={"checks": Artifact.of(report)}, checks=tuple(checks), message=line)


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("repaired_wheel", "repair_report", "conda_package", "source_info", *companion_artifacts("conda_package")),
    writes=("checks",),
    shaped_by=("repodata",),
)
