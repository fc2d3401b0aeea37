"""The verify stage's solve (TB301, TB302): the new package, with the cell's Python, must be the build a solver picks.

With stored repodata (--repodata DIR or TORCHBUILD_REPODATA: ``<channel>/<subdir>/repodata.json``) the solve runs
offline against it, with the records the stored subset lacks that torchbuild stores for the cell's channel (the
CUDA libraries: ``plan.solve.overlay``) searched first. Without, it runs against the live channel through
py-rattler's gateway, cached in the user's cache folder; where that channel cannot be reached the check is
"unverified" (not run), and says what runs it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from torchbuild.channels import repodata as rd
from torchbuild.conda import solve as solver
from torchbuild.config import environment
from torchbuild.host.files import write_atomic
from torchbuild.knowledge.compat import version_key
from torchbuild.plan import Plan
from torchbuild.results import Check, define, result, skipped, unverified

SOLVER_LINES = 15  # of the solver's explanation, in a failed solve check
TB301 = define("TB301", "pytorch resolves to this build against the real repodata")
TB302 = define("TB302", "pytorch and its companions resolve to these builds together against the real repodata")
LIVE_CACHE = "conda-repodata"  # the gateway's cache of the live channels' repodata, in the user's cache folder


def _records_in(channel: Path, subdir: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for sub in (subdir, "noarch"):
        path = channel / sub / "repodata.json"
        if path.is_file():
            records.extend(rd.listed(rd.load(path)).values())
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
    record = rd.listed(rd.load(local / subdir / "repodata.json")).get(file_name) or {}
    return [str(d) for d in record.get("depends", [])]


def _leave_out(local: Path, subdir: str, file_name: str, names: set[str]) -> list[str]:
    """Drop the run dependencies named ``names`` from the package's record in the local channel's repodata (a
    repodata patch, as channels apply them); returns the dropped specs."""
    path = local / subdir / "repodata.json"
    raw = rd.load(path)
    record = rd.listed(raw).get(file_name)  # the record in ``raw``, changed in place
    if record is None:
        return []
    dropped = [d for d in record.get("depends", []) if d.split()[0] in names]
    record["depends"] = [d for d in record.get("depends", []) if d not in dropped]
    write_atomic(path, json.dumps(raw, indent=1) + "\n")
    return dropped


def _versions_in(channels: Sequence[Path], subdir: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for channel in channels:
        for sub in (subdir, "noarch"):
            path = channel / sub / "repodata.json"
            if path.is_file():
                for record in rd.listed(rd.load(path)).values():
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
                nearest = sorted(have, key=version_key)[-3:]
                found[name] = f"{spec} (stored: {', '.join(nearest) if nearest else 'no record of ' + name})"
    return found


def _leave_out_other_pythons(
    local: Path, stored: Sequence[Path], plan: Plan, packages: Sequence[Path], files_of: Mapping[str, Path]
) -> list[str]:
    """Drop, from each of ``packages``' records in the local channel, the run dependencies no stored record installs
    beside the cell's Python (the subset has them for other Pythons, or not at all); returns them, said."""
    subdir, python = plan.conda.subdir, plan.python
    servable = set().union(*(_names_for_python(channel, subdir, python) for channel in stored))
    servable |= {plan.root.conda.name, *files_of}
    dropped: list[str] = []
    for package in packages:
        names = {d.split()[0] for d in _depends_of(local, subdir, package.name)}
        missing = {name for name in names - servable if not name.startswith("__")}
        for spec in _leave_out(local, subdir, package.name, missing) if missing else []:
            said = f"{spec} (stored: none for Python {python})"
            dropped += [said] if said not in dropped else []
    return dropped


def solve_check(
    package: Path,
    plan: Plan,
    repodata: Path | None,
    work: Path,
    companions: Mapping[str, Path] | None = None,
    cache_dir: Path | None = None,
) -> Check:
    """TB301: `pytorch` + `python X.Y.*` against a channel of this package alone plus the real repodata of the
    cell's era (packaging.yaml `solve_channels`): the stored ``repodata``, or without it the live channel (its
    repodata cached under ``cache_dir``). With ``companions`` (name -> package), TB302: `pytorch` and each
    companion, against a channel of them all: every one of them must be picked."""
    code = TB302 if companions else TB301
    if repodata is None:
        return _live_check(code, package, plan, work, dict(companions or {}), cache_dir)
    channel = plan.solve.channel
    real = repodata / channel
    if not (real / plan.conda.subdir / "repodata.json").is_file():
        return skipped(code, package, f"no {channel} repodata for {plan.conda.subdir} in {repodata}")
    if not _has_python(real, plan.conda.subdir, plan.python):
        # the stored repodata are subsets: without any python X.Y record no solve can say anything of this package
        reason = f"the stored {channel} repodata for {plan.conda.subdir} has no python {plan.python}.*"
        return skipped(code, package, reason)
    companions = dict(companions or {})
    specs = [plan.root.conda.name, *companions, f"python {plan.python}.*"]
    virtual = plan.solve.virtual_packages
    overlay = plan.solve.overlay_channel
    stored = [*([overlay] if overlay else []), real]
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
    return _judged(code, package, plan, solution, local, companions, channel, dropped, pinned)


def _live_check(
    code: str, package: Path, plan: Plan, work: Path, companions: Mapping[str, Path], cache_dir: Path | None
) -> Check:
    """The solve against the live channel of the cell's era; "unverified" where it cannot be reached."""
    channel = plan.solve.channel
    url = solver.CHANNEL_URLS[channel]
    specs = [plan.root.conda.name, *companions, f"python {plan.python}.*"]
    pinned = {rule.conda for rule in plan.conda.pypi_names.values() if rule.exact_as_prefix}
    with tempfile.TemporaryDirectory(prefix="solve-", dir=work) as tmp:
        local = solver.make_local_channel([package, *companions.values()], Path(tmp) / "channel")
        cache = cache_dir / LIVE_CACHE if cache_dir is not None else Path(tmp) / "cache"
        try:
            virtual = plan.solve.virtual_packages
            solution = solver.solve([local, url], specs, plan.conda.subdir, virtual, cache_dir=cache)
        except solver.Unsolvable as exc:
            explanation = "\n".join(str(exc).splitlines()[:SOLVER_LINES])
            return result(code, package, [f"{' + '.join(specs)} has no solution against {url}: {explanation}"])
        except solver.ChannelUnreachable as exc:
            fix = f"give --repodata DIR (or {environment.REPODATA}=DIR) with stored {channel} repodata to solve offline"
            return unverified(code, package, f"{url} could not be reached ({exc}); {fix}")
    return _judged(code, package, plan, solution, local, companions, f"{channel} (live, {url})", [], pinned)


def _judged(
    code: str,
    package: Path,
    plan: Plan,
    solution: Sequence[solver.Solved],
    local: Path,
    companions: Mapping[str, Path],
    channel: str,
    dropped: Sequence[str],
    pinned: set[str],
) -> Check:
    """The check of a solution: it took this very build (and each companion's) from the local channel."""
    virtual = plan.solve.virtual_packages
    local_url = solver.channel_url(local).rstrip("/")
    files = {plan.root.conda.name: package.name, **{name: path.name for name, path in companions.items()}}
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


def _chosen(solution: Sequence[solver.Solved], names: set[str]) -> list[str]:
    return [f"{s.name} {s.version}" for s in solution if s.name in names]
