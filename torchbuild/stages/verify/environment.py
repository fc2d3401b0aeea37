"""The conda package in the environment it is installed into (win-64): its DLLs and those of its run dependencies.

- TB105: every import of every PE file in the package resolves as it will in a conda environment: inside the package
  (the importer's folder, torch\\lib, torch.libs), to a DLL a run dependency installs (dll_providers.yaml
  `conda_packages`: Library\\bin), to Python's, Windows' or the driver's.
- TB106: no DLL the package's binaries load comes from two places: the package and a run dependency (two OpenMP
  runtimes in one process is "OMP: Error #15"; with two msvcp140.dll whichever loads first wins), or two run
  dependencies.
- TB107: the package depends on a VC runtime at least as new as the MSVC that linked its binaries (the floor the
  repair read; vc_runtime.py).
- P103: one OpenMP runtime in the environment's process, its run dependencies' included (platforms/closure.py), and
  what the declared requirements' libraries load in turn (the verify stage passes them in).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from torchbuild.conda.archive import CondaArchive
from torchbuild.knowledge import dll_providers
from torchbuild.platforms.closure import ClosureReport
from torchbuild.platforms.windows import pe, vc_runtime
from torchbuild.results import Check, define, result, skipped
from torchbuild.wheel.repair_report import RepairReport

if TYPE_CHECKING:
    from torchbuild.plan import Plan

TB105 = define("TB105", "every DLL import resolves in a conda environment")
TB106 = define("TB106", "no DLL is provided twice in the environment")
TB107 = define("TB107", "the VC runtime dependency serves the binaries' MSVC")
SEARCHED = ("torch/lib", "torch.libs")  # below site-packages; what torch/__init__.py and delvewheel's patch add
LIBRARY_BIN = "Library/bin"


def _providers(name: str, provided: Mapping[str, str]) -> list[str]:
    return sorted({pkg for pattern, pkg in provided.items() if dll_providers.matches(name, [pattern])})


def environment_closure(pkg: CondaArchive, plan: Plan) -> ClosureReport[pe.PeInfo]:
    """Every import of the (win-64) package's PE files, resolved as in a conda environment."""
    site = plan.conda.site_packages
    files = [m.name for m in pkg.files()]
    pes = [m.pe for m in pkg.files() if m.pe is not None]
    return pe.resolve(
        pes, files, python=plan.python, search_dirs=[f"{site}/{d}" for d in SEARCHED] + [LIBRARY_BIN],
        provided=plan.conda.provided_dlls,
    )  # fmt: skip


def environment_checks(
    pkg: CondaArchive, plan: Plan, report: RepairReport | None, closure: ClosureReport[pe.PeInfo] | None = None
) -> list[Check]:
    """TB105-TB107 and P103 (``closure``: the package's environment_closure, where the caller has it already)."""
    if not pkg.is_windows:
        reason = f"not a Windows package ({pkg.subdir})"
        return [skipped(code, pkg.path, reason) for code in (TB105, TB106, TB107)]
    provided = plan.conda.provided_dlls
    files = [m.name for m in pkg.files()]
    closure = closure or environment_closure(pkg, plan)
    gaps = [m.message.replace("in the wheel", "in the package") for m in closure.missing]
    checks = [result(TB105, pkg.path, gaps + [b.reason for b in closure.bad], closure.summary())]

    twice = []
    for member in files:
        name = PurePosixPath(member).name
        if name.lower().endswith(".dll") and (packages := _providers(name, provided)):
            twice.append(f"{member} is in the package and {', '.join(packages)} installs it too")
    for needed in sorted({r.needed.lower() for r in closure.resolved if r.via == "dependency"}):
        if len(packages := _providers(needed, provided)) > 1:
            twice.append(f"{needed} is installed by {' and '.join(packages)}")
    left = len(provided)
    checks.append(result(TB106, pkg.path, twice, f"each DLL from one place ({left} patterns left to run dependencies)"))
    checks.append(_vc_runtime_check(pkg, plan, report))
    checks.append(closure.openmp_check())
    return checks


def _vc_runtime_check(pkg: CondaArchive, plan: Plan, report: RepairReport | None) -> Check:
    rule = plan.conda.vc_runtime
    if rule is None:
        return skipped(TB107, pkg.path, f"no VC runtime dependency for {plan.platform}")
    if report is None:
        return skipped(TB107, pkg.path, "no repair report to read the binaries' floor from")
    floor = report.vc_runtime_floor
    expected = vc_runtime.conda_spec(rule, floor)
    depends = [str(d) for d in pkg.index.get("depends") or []]
    named = [d for d in depends if d.split()[0] == rule.package]
    why = f"the floor MSVC {floor.version} set by {floor.set_by}" if floor else f"the data's minimum {rule.minimum}"
    if expected in named:
        return result(TB107, pkg.path, [], f"{expected} ({why})")
    found = ", ".join(named) or f"no {rule.package}"
    return result(TB107, pkg.path, [f"index.json depends on {found}; {why} needs {expected}"])
