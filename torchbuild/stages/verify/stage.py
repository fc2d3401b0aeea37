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
- a companion the Plan builds (win-64 torchvision; companion.py beside this module): its package's checks, TB111
  (the Plan's package, pinning the exact pytorch build) and TB112 (its DLLs resolve beside torch's package), and
  TB302: ``pytorch`` and the companions solved together against a channel of them all must pick every one of them.

Every check goes into the StageResult and into ``checks.json`` in the stage directory; any failed check fails the
stage with a message naming each failed check's code and file.
"""

from __future__ import annotations

import concurrent.futures
import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from torchbuild.conda import solve as solver
from torchbuild.conda.archive import TB100, CondaArchive, PackageUnreadable, read_package
from torchbuild.conda.checks.package import run_checks
from torchbuild.config import datafiles, nesting
from torchbuild.errors import StageFailed
from torchbuild.host.files import write_atomic
from torchbuild.plan import Plan
from torchbuild.platforms.closure import ClosureReport, OpenMpRuntime, UpstreamOpenMp
from torchbuild.platforms.windows.pe import PeInfo
from torchbuild.results import Artifact, Check, StageResult, define, failures, result, sha256_of, skipped, summary
from torchbuild.stages import Context, Stage, companion_artifact, companion_artifacts, requirement_libraries
from torchbuild.stages.verify import companion
from torchbuild.stages.verify.environment import environment_checks, environment_closure
from torchbuild.stages.verify.loader import loader_checks
from torchbuild.wheel.checks import TB207, check_wheel
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import RepairReport
from torchbuild.wheel.scripts import script_check

NAME = "verify"
SOLVER_LINES = 15  # of the solver's explanation, in a failed solve check
TB104 = define("TB104", "the package is the one the Plan names")
TB301 = define("TB301", "pytorch resolves to this build against the real repodata")
TB302 = define("TB302", "pytorch and its companions resolve to these builds together against the real repodata")


def plan_problems(pkg: CondaArchive, plan: Plan, artifact: Artifact) -> list[str]:
    """TB104: the file is the one the conda stage recorded, and its index.json is the Plan's package."""
    problems: list[str] = []
    fmt = "tar.bz2" if pkg.path.name.endswith(".tar.bz2") else "conda"
    expected_name = plan.conda.archives[fmt]
    if pkg.path.name != expected_name:
        problems.append(f"file name {pkg.path.name}, the Plan's is {expected_name}")
    size = pkg.path.stat().st_size
    if artifact.size and size != artifact.size:
        problems.append(f"{size} bytes on disk, the conda stage recorded {artifact.size}")
    if artifact.sha256 and sha256_of(pkg.path) != artifact.sha256:
        problems.append("sha256 on disk differs from what the conda stage recorded")
    conda = plan.conda
    wanted = {
        "name": conda.name,
        "version": conda.version,
        "build": conda.build_string,
        "build_number": conda.build_number,
        "subdir": conda.subdir,
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


def _records_in(channel: Path, subdir: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for sub in (subdir, "noarch"):
        path = channel / sub / "repodata.json"
        if path.is_file():
            raw = nesting.loads(path.read_text(encoding="utf-8"))
            for key in ("packages", "packages.conda"):
                records.extend((raw.get(key) or {}).values())
    return records


def _admits_python(record: Mapping[str, Any], python: str) -> bool:
    """Whether a record can install beside Python X.Y: its python / python_abi dependency admits X.Y (no such
    dependency: any Python; a spec this cannot read counts as admitting)."""
    probe = Version(f"{python}.99")
    for depend in record.get("depends", []):
        name, _, spec = str(depend).partition(" ")
        if name in ("python", "python_abi") and spec:
            return any(_conda_version_admits(part, probe) for part in spec.split()[0].split("|"))
    return True


def _conda_version_admits(spec: str, version: Version) -> bool:
    """A conda version spec (``>=3.8,<3.9.0a0``, ``3.8.*``, ``3.8``) against ``version``, through PEP 440."""
    if spec[:1].isdigit():
        spec = "==" + (spec if spec.endswith(".*") else spec + ".*")
    try:
        return version in SpecifierSet(spec)
    except InvalidSpecifier:
        return True


def _names_for_python(channel: Path, subdir: str, python: str) -> set[str]:
    """The package names with a record that installs beside Python X.Y."""
    return {str(r["name"]) for r in _records_in(channel, subdir) if _admits_python(r, python)}


def _has_python(channel: Path, subdir: str, python: str) -> bool:
    records = _records_in(channel, subdir)
    return any(r["name"] == "python" and str(r["version"]).startswith(f"{python}.") for r in records)


def _depends_of(local: Path, subdir: str, file_name: str) -> list[str]:
    raw = nesting.loads((local / subdir / "repodata.json").read_text(encoding="utf-8"))
    record = (raw.get("packages.conda") or {}).get(file_name) or (raw.get("packages") or {}).get(file_name) or {}
    return [str(d) for d in record.get("depends", [])]


def _leave_out(local: Path, subdir: str, file_name: str, names: set[str]) -> list[str]:
    """Drop the run dependencies named ``names`` from the package's record in the local channel's repodata (a
    repodata patch, as channels apply them); returns the dropped specs."""
    path = local / subdir / "repodata.json"
    raw = nesting.loads(path.read_text(encoding="utf-8"))
    record = (raw.get("packages.conda") or {}).get(file_name) or (raw.get("packages") or {}).get(file_name)
    if record is None:
        return []
    dropped = [d for d in record.get("depends", []) if d.split()[0] in names]
    record["depends"] = [d for d in record.get("depends", []) if d not in dropped]
    write_atomic(path, json.dumps(raw, indent=1) + "\n")
    return dropped


OVERLAY = "repodata"  # torchbuild/data/repodata/<channel>: records of the CUDA libraries the shared subset lacks


def _versions_in(channels: Sequence[Path], subdir: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for channel in channels:
        for sub in (subdir, "noarch"):
            path = channel / sub / "repodata.json"
            if path.is_file():
                raw = nesting.loads(path.read_text(encoding="utf-8"))
                for key in ("packages", "packages.conda"):
                    for record in (raw.get(key) or {}).values():
                        found.setdefault(str(record["name"]), set()).add(str(record["version"]))
    return found


def _unrecorded_pins(depends: Sequence[str], versions: Mapping[str, set[str]]) -> dict[str, str]:
    """The run dependencies on one exact version (the wheel's pins: ``libcublas 12.8.4.1.*``, ``triton ==3.6.0``)
    that no stored record has: name -> the spec and what the stored data has instead. A stored subset holds some
    versions of a package, not all; a range or a bare name still has to solve."""
    found: dict[str, str] = {}
    for spec in depends:
        name, _, version = spec.partition(" ")
        exact = version.removeprefix("==")
        if version.endswith(".*") or (version.startswith("==") and not any(c in exact for c in ",|<>*")):
            prefix = exact.removesuffix(".*")
            have = versions.get(name, set())
            if not any(v == prefix or (version.endswith(".*") and v.startswith(prefix + ".")) for v in have):
                nearest = sorted(have, key=_version_key)[-3:]
                found[name] = f"{spec} (stored: {', '.join(nearest) if nearest else 'no record of ' + name})"
    return found


def _leave_out_other_pythons(
    local: Path, stored: Sequence[Path], plan: Plan, packages: Sequence[Path], files_of: Mapping[str, Path]
) -> list[str]:
    """Drop, from each of ``packages``' records in the local channel, the run dependencies no stored record installs
    beside the cell's Python (the subset has them for other Pythons, or not at all); returns them, said."""
    subdir, python = plan.conda.subdir, plan.python
    servable = set().union(*(_names_for_python(channel, subdir, python) for channel in stored))
    servable |= {plan.conda.name, *files_of}
    dropped: list[str] = []
    for package in packages:
        names = {d.split()[0] for d in _depends_of(local, subdir, package.name)}
        missing = {name for name in names - servable if not name.startswith("__")}
        for spec in _leave_out(local, subdir, package.name, missing) if missing else []:
            said = f"{spec} (stored: none for Python {python})"
            dropped += [said] if said not in dropped else []
    return dropped


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def solve_check(
    package: Path, plan: Plan, repodata: Path | None, work: Path, companions: Mapping[str, Path] | None = None
) -> Check:
    """TB301: `pytorch` + `python X.Y.*` against a channel of this package alone plus the real repodata of the
    cell's era (packaging.yaml `solve_channels`). With ``companions`` (name -> package), TB302: `pytorch` and each
    companion, against a channel of them all: every one of them must be picked."""
    code = TB302 if companions else TB301
    if repodata is None:
        return skipped(code, package, "no repodata to solve against (RunOptions.repodata is not set)")
    channel = plan.solve.channel
    real = repodata / channel
    if not (real / plan.conda.subdir / "repodata.json").is_file():
        return skipped(code, package, f"no {channel} repodata for {plan.conda.subdir} in {repodata}")
    if not _has_python(real, plan.conda.subdir, plan.python):
        # the stored repodata are subsets: without any python X.Y record no solve can say anything of this package
        reason = f"the stored {channel} repodata for {plan.conda.subdir} has no python {plan.python}.*"
        return skipped(code, package, reason)
    companions = dict(companions or {})
    specs = [plan.conda.name, *companions, f"python {plan.python}.*"]
    virtual = plan.solve.virtual_packages
    overlay = datafiles.directory(OVERLAY)
    stored = [c for c in ([overlay / channel] if overlay else []) if (c / plan.conda.subdir).is_dir()] + [real]
    with tempfile.TemporaryDirectory(prefix="solve-", dir=work) as tmp:
        local = solver.make_local_channel([package, *companions.values()], Path(tmp) / "channel")
        dropped: list[str] = []
        if plan.solve.absent:
            # absent for the cell's Python: conda-forge's win-64 subset has numpy, but none for Python 3.8
            unservable = set(plan.solve.absent) - _names_for_python(real, plan.conda.subdir, plan.python)
            dropped = _leave_out(local, plan.conda.subdir, package.name, unservable)
            for other in companions.values():  # torchvision's numpy and pillow, in the 2018 subset's world
                dropped += [d for d in _leave_out(local, plan.conda.subdir, other.name, unservable) if d not in dropped]
        # An exact pin of the wheel's that no stored record has (conda-forge never packaged it, or the subset lacks
        # it) is left out and said; everything else must solve.
        pinned = {rule.conda for rule in plan.conda.pypi_names.values() if rule.exact_as_prefix}
        depends = _depends_of(local, plan.conda.subdir, package.name)
        unrecorded = _unrecorded_pins(depends, _versions_in(stored, plan.conda.subdir))
        if unrecorded:
            _leave_out(local, plan.conda.subdir, package.name, set(unrecorded))
            dropped += list(unrecorded.values())
        # A dependency the stored subset holds for other Pythons only (conda-forge's win-64 pillow has none for 3.10)
        dropped += _leave_out_other_pythons(local, stored, plan, [package, *companions.values()], files_of=companions)
        try:
            channels = [local, *stored]
            solution = solver.solve(channels, specs, plan.conda.subdir, virtual, cache_dir=Path(tmp) / "cache")
        except solver.Unsolvable as exc:
            explanation = "\n".join(str(exc).splitlines()[:SOLVER_LINES])
            return result(code, package, [f"{' + '.join(specs)} has no solution against {channel}: {explanation}"])
    local_url = solver.channel_url(local).rstrip("/")
    files = {plan.conda.name: package.name, **{name: path.name for name, path in companions.items()}}
    ours = [s for s in solution if files.get(s.name) == s.file_name and s.channel.rstrip("/") == local_url]
    if len(ours) != len(files):
        chosen = [str(s) for s in solution if s.name in files]
        return result(code, package, [f"the solution took {', '.join(chosen) or 'none of ' + ', '.join(files)}"])
    python = next((s.version for s in solution if s.name == "python"), "?")
    vpk = ", ".join(f"{k}={v}" for k, v in virtual.items())
    picked = ", ".join(f"{s.name} {s.version} {s.build}" for s in solution if s.name in ("vc", "vc14_runtime"))
    built = " and ".join(f"{s.name}-{s.version}-{s.build}" for s in ours)
    whose = "packages'" if companions else "package's"
    note = (
        f"{built} from the new {whose} channel, with python {python} "
        f"and {len(solution) - 1 - len(ours)} more packages from {channel} ({vpk})"
        + (f"; VC runtime: {picked}" if picked else "")
        + (f"; left out, no record in the stored {channel} data: {', '.join(dropped)}" if dropped else "")
        + (f"; run dependencies: {', '.join(_chosen(solution, pinned))}" if pinned & {s.name for s in solution} else "")
    )
    return result(code, package, [], note)


def _chosen(solution: Sequence[Any], names: set[str]) -> list[str]:
    return [f"{s.name} {s.version}" for s in solution if s.name in names]


def conda_checks(
    artifact: Artifact,
    plan: Plan,
    repodata: Path | None,
    work: Path,
    report: RepairReport | None = None,
    follow: Callable[[ClosureReport[PeInfo]], ClosureReport[PeInfo]] | None = None,
) -> tuple[list[Check], tuple[OpenMpRuntime, ...] | None]:
    """The package's checks, and the OpenMP runtimes its binaries import (None where not read: not a win-64
    package, or unreadable) for the check of the process it shares with the companions; ``follow``: what the
    OpenMP count adds of the declared requirements' libraries (requirement_libraries.follow)."""
    # The solve (rattler, in a process of its own) runs while this one reads the package back.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        solved = pool.submit(solve_check, artifact.path, plan, repodata, work)
        try:
            pkg = read_package(artifact.path)
        except PackageUnreadable as exc:
            reason = "the package could not be read (TB100)"
            return [result(TB100, artifact.path, [str(exc)]), skipped(TB301, artifact.path, reason)], None
        closure = environment_closure(pkg, plan) if pkg.is_windows else None
        closure = follow(closure) if closure is not None and follow is not None else closure
        checks = [
            result(TB100, pkg.path, [], f"{pkg.format}, {len(pkg.files()):,} payload files"),
            *run_checks(pkg),
            result(TB104, pkg.path, plan_problems(pkg, plan, artifact), f"{plan.conda.filename} as planned"),
            *environment_checks(pkg, plan, report, closure),
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
    if conda is not None:
        found, torch_openmp = conda_checks(conda, plan, ctx.options.repodata, work, repaired, _follower(ctx))
        checks += found
    built = {c.name: a for c in plan.companions if (a := ctx.inputs.get(companion_artifact("conda_package", c.name)))}
    if built:
        checks += companion.companion_checks(plan, built, conda, torch_openmp, _upstream(ctx))
        if conda is not None:
            paths = {name: artifact.path for name, artifact in built.items()}
            checks.append(solve_check(conda.path, plan, ctx.options.repodata, work, paths))
    if wheel is not None:
        checks += check_wheel(wheel.path, plan.wheel, plan.conda.filename.removesuffix(".conda"))
        checks.append(script_check(wheel.path, [rule.value for rule in plan.broken_scripts]))
    log = ctx.stage_dir("logs") / "verify-loadcheck.log"
    checks += loader_checks(
        plan, wheel.path if wheel else None, conda.path if conda else None, work, ctx.options.cache_dir, log,
        {name: artifact.path for name, artifact in built.items()},
    )  # fmt: skip
    report = work / "checks.json"
    _write(checks, report)

    failed = failures(checks)
    counts = {s: sum(c.status == s for c in checks) for s in ("passed", "failed", "skipped")}
    line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    budget = next((c for c in checks if c.code == TB207 and c.status != "skipped"), None)
    if budget is not None:
        line += f"; wheel path budget: {budget.message}"
    if failed:
        raise StageFailed(NAME, f"{len(failed)} of {len(checks)} checks failed ({report}):\n{summary(failed)}", checks)
    return StageResult(outputs={"checks": Artifact.of(report)}, checks=tuple(checks), message=line)


STAGE = Stage(
    name=NAME,
    run=run,
    reads=("repaired_wheel", "repair_report", "conda_package", "source_info", *companion_artifacts("conda_package")),
    writes=("checks",),
    shaped_by=("repodata",),
)
