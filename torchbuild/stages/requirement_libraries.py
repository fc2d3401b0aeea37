"""What the libraries of a cell's declared requirements bring into the process in turn, for the closure's OpenMP
count (platforms/closure.py ``with_requirement_libraries``), shared by the repair and verify.

Each library of ``plan.declared_libraries`` and ``plan.vendored_libraries`` is read from its pinned wheel (fetched
once by sha256 and unpacked, host/downloads.py): its import table (PE) or DT_NEEDED (ELF), and what cuda_wheels.yaml
records it loads by name (MKL's threading layer loads Intel's OpenMP with LoadLibrary: its import table names
KERNEL32.dll alone). A wheel the data records as read and free of OpenMP (cuda_wheels.yaml ``no_openmp``: the nvidia-*
sets, GBs) is not fetched. The acceptance of upstream's own OpenMP set needs the wheel to be upstream's file: the sha256
the source stage recorded (source.json) must be one of the wheels the Plan's ``upstream_openmp`` names.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from torchbuild.errors import StageFailed
from torchbuild.host import downloads, pip
from torchbuild.knowledge import cuda_wheels
from torchbuild.knowledge.build_deps import DependencyError
from torchbuild.platforms.closure import (
    ClosureReport,
    F,
    RequirementLibrary,
    UpstreamOpenMp,
    with_requirement_libraries,
)
from torchbuild.platforms.target import LibraryUnreadable, Platform
from torchbuild.wheel.provenance import SourceInfo

if TYPE_CHECKING:
    from torchbuild.plan import Plan

UPSTREAM_OPENMP_IN = "torchbuild/data/companions.yaml upstream_openmp"


def read(plan: Plan, cache_dir: Path, log: Path, stage: str) -> tuple[RequirementLibrary, ...]:
    """Every library of the cell's declared requirements (kept or vendored), with what it imports and loads by
    name; StageFailed naming the requirement whose wheel cannot be had or read."""
    # every platform tag the cell accepts: nvidia-cuda-nvrtc-cu12's linux wheel is manylinux_2_12 for a 2_28 cell
    target = pip.target_args(plan.python, None, list(plan.wheel_tags.accepted_platforms))
    found: list[RequirementLibrary] = []
    for wheel in (*plan.declared_libraries, *plan.vendored_libraries):
        if wheel.no_openmp:  # read once, recorded: nothing of it bears on the count, no need to fetch GBs
            found += [RequirementLibrary(name=PurePosixPath(member).name, provider=wheel.pin, imports=(), loads=(),
                                         loads_recorded_in="") for member in wheel.libraries]  # fmt: skip
            continue
        try:
            root = downloads.requirement_libraries(wheel, target, cache_dir, log)
        except DependencyError as exc:
            raise StageFailed(stage, f"cannot read the libraries of {wheel.pin}: {exc}") from None
        loads = {name.lower(): names for name, names in wheel.loaded_by_name}
        for member in wheel.libraries:
            name = PurePosixPath(member).name
            found.append(RequirementLibrary(
                name=name, provider=wheel.pin, imports=_imports(plan.platform_module, root / member, member, stage),
                loads=loads.get(name.lower(), ()), loads_recorded_in=cuda_wheels.DATA_FILE if name.lower() in loads
                else "",
            ))  # fmt: skip
    return tuple(found)


def _imports(platform: Platform, path: Path, member: str, stage: str) -> tuple[str, ...]:
    try:
        return platform.library_imports(path, member)
    except LibraryUnreadable as exc:
        raise StageFailed(stage, f"cannot read the imports of {path} ({member}): {exc}") from None


def upstream_openmp(plan: Plan, source: SourceInfo | None) -> UpstreamOpenMp | None:
    """The OpenMP set the closure accepts: the one the data records for the release, only where the wheel is
    upstream's own file (by sha256, as the source stage took it); None for a compiled wheel, any other wheel, or a
    release with no record."""
    record = plan.upstream_openmp
    if record is None or source is None or source.kind != "wheel":
        return None
    wheel = record.of(source.sha256)
    if wheel is None:
        return None
    return UpstreamOpenMp(
        runtimes=frozenset(record.runtimes), who=f"upstream's torch {record.torch} ({wheel.file})",
        recorded_in=UPSTREAM_OPENMP_IN,
    )  # fmt: skip


def not_upstream(plan: Plan, source: SourceInfo | None) -> str:
    """Why a release with a recorded OpenMP set is not accepted here ("" where there is no record, or it is)."""
    record = plan.upstream_openmp
    if record is None or upstream_openmp(plan, source) is not None:
        return ""
    if source is None:
        why = "where the wheel came from is not known"
    elif source.kind != "wheel":
        why = f"this wheel was compiled here ({source.origin})"
    else:
        why = f"this wheel (sha256 {source.sha256[:12]}...) is none of them"
    return f"{UPSTREAM_OPENMP_IN} passes upstream's own wheels of torch {record.torch} only: {why}"


def follow(
    report: ClosureReport[F], plan: Plan, source: SourceInfo | None, cache_dir: Path, log: Path, stage: str
) -> ClosureReport[F]:
    """``report`` whose OpenMP count follows the declared requirements' libraries, accepting upstream's recorded
    set where the wheel is upstream's own."""
    return with_requirement_libraries(
        report, read(plan, cache_dir, log, stage), upstream_openmp(plan, source), not_upstream(plan, source)
    )
