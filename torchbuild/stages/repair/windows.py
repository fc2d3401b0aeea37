"""The win-64 repair: which DLLs a wheel needs, from where, and delvewheel to put them in (stages/repair.py runs it).

What is vendored is derived from the wheel: the DLLs its PE files import that are nowhere else (the gaps of its
import closure), what those DLLs import in turn, and what ``loaded_by_name`` says is loaded at run time by a name in
no import table; each must be a redistributable DLL the cell's data names (``redistributable_dlls``), and comes
from its provider (dll_providers.py). A VC runtime older than the floor the binaries set (vc_runtime.py) is refused
before anything is written.

Name-mangling policy: none (--no-mangle-all). delvewheel can rename vendored DLLs (msvcp140-<hash>.dll) and rewrite
the import tables that name them, so that each package gets a private copy. We do not:
- torch's own DLLs (c10.dll, torch_cpu.dll, ...) keep their names (--ignore-existing): C++ extensions built against
  torch link c10.lib/torch_cpu.lib, whose import records name c10.dll and torch_cpu.dll;
- the VC runtime is meant to be one per process: an extension built against torch imports MSVCP140.dll by that name,
  and a renamed copy for torch would put two C++ runtimes in one process. The copy we ship is at least as new as the
  binaries' floor, and Windows reuses an already loaded DLL of the same name, so whichever loads first serves all;
- CUDA DLLs are versioned by name already (cudart64_12.dll), and CUDA extensions import them by those names.
The cost: an older msvcp140.dll loaded into the process before torch (from another package that ships one) wins over
ours; the smoke stages are what catch that.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from torchbuild.errors import StageFailed
from torchbuild.host import archives, downloads, pip
from torchbuild.knowledge import cuda_wheels, dll_providers
from torchbuild.knowledge.build_deps import DependencyError
from torchbuild.platforms.closure import ClosureReport
from torchbuild.platforms.windows import authenticode, pe, vc_runtime
from torchbuild.platforms.windows import providers as provider_dlls
from torchbuild.results import Check
from torchbuild.wheel.repair_report import Floor, Vendored

if TYPE_CHECKING:
    from torchbuild.plan import Plan, WindowsFacts

STAGE = "repair"
LIBS_DIR = "torch.libs"  # where delvewheel puts what it vendors into the torch wheel
MAX_ROUNDS = 8  # of "what the vendored DLLs need in turn": CUDA's chains are three deep


@dataclass(frozen=True)
class Needs:
    """What the repair will vendor, and why."""

    located: tuple[provider_dlls.Located, ...]
    imported_by: dict[str, list[str]]  # DLL name (lower) -> the files that import it
    runtime_loaded: tuple[str, ...]  # patterns shipped because something loads them by name
    floor: Floor | None
    signers: dict[Path, str]  # each located file -> its verified signer, or why it has none


def pe_members(wheel: Path) -> list[str]:
    with archives.open_zip(wheel) as archive:
        return [n for n in archive.namelist() if n.lower().endswith(pe.PE_SUFFIXES)]


def _gaps(report: ClosureReport[pe.PeInfo]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for gap in report.missing:
        found.setdefault(gap.needed.lower(), []).append(gap.file)
    return found


def facts_of(plan: Plan) -> WindowsFacts:
    """The Plan's win-64 facts; StageFailed for a Plan of another platform."""
    if plan.windows is None:
        raise StageFailed(STAGE, f"the Plan of {plan.cell_id} names no DLL providers (not a win-64 Plan?)")
    return plan.windows


def _refuse_unknown(plan: Plan, wanted: Sequence[str], imported_by: dict[str, list[str]]) -> None:
    redistributable = facts_of(plan).redistributable_dlls
    unknown = [w for w in wanted if not dll_providers.matches(w, redistributable)]
    if unknown:
        why = "; ".join(
            f"{w} (imported by {', '.join(imported_by[w.lower()][:3])})" if w.lower() in imported_by else w
            for w in unknown
        )
        known = ", ".join(redistributable) or "none"
        raise StageFailed(
            STAGE,
            f"the wheel needs {why}, which is no redistributable DLL of {plan.cell_id} (dll_providers.yaml "
            f"`redistributables` for its MSVC {plan.toolchain.msvc_toolset} and CUDA {plan.cuda}: {known}). Ship it "
            "in the wheel, or add it to the data with its provider",
        )


def requirement_dlls(plan: Plan, cache_dir: Path, log: Path) -> dict[str, provider_dlls.Located]:
    """The DLLs of the declared requirements the cell vendors (``plan.vendored_libraries``; none where it keeps
    them), by lower-case name: each from its pinned wheel (fetched once by sha256, downloads.py), with the signer
    dll_providers.yaml names for that DLL (Intel's for MKL and OpenMP), or why it may come unsigned."""
    found: dict[str, provider_dlls.Located] = {}
    target = pip.target_args(plan.python, None, [plan.wheel_tags.platform])
    providers = plan.windows.dll_providers if plan.windows else None
    for wheel in plan.vendored_libraries:
        try:
            archive = downloads.requirement_wheel(wheel, target, cache_dir, log)
            root = downloads.requirement_libraries(wheel, target, cache_dir, log)
        except DependencyError as exc:
            raise StageFailed(STAGE, f"cannot vendor {wheel.pin}: {exc}") from None
        described = provider_dlls.describe_wheel(archive, url="")
        for member in wheel.libraries:
            name = PurePosixPath(member).name
            provider = providers.provider_for(name) if providers else None
            signer = provider.signer if provider else ""
            found.setdefault(name.lower(), provider_dlls.Located(
                pattern=name, path=root / member, provider=wheel.name, origin=f"wheel {wheel.file}", wheel=described,
                signer=signer, unsigned=None if signer else f"{dll_providers.DATA_FILE} names no signer for {name}",
            ))  # fmt: skip
    return found


def _loaded_by_requirements(plan: Plan, names: Sequence[str]) -> list[str]:
    """What the vendored requirements' libraries among ``names`` load by name (MKL's CPU kernels, cuda_wheels.yaml)."""
    have = {n.lower() for n in names}
    return [
        dll
        for wheel in plan.vendored_libraries
        for loader, loads in wheel.loaded_by_name
        if loader.lower() in have
        for dll in loads
    ]


def needs(
    plan: Plan,
    wheel: Path,
    cache_dir: Path,
    log: Path,
    beside: Mapping[str, str] | None = None,
    on_demand: Mapping[str, str] | None = None,
    from_requirements: Mapping[str, provider_dlls.Located] | None = None,
) -> Needs:
    """What ``wheel`` needs vendored, located at its providers; StageFailed naming what cannot be had. ``beside``:
    DLL names another wheel installed beside it provides (a companion's: torch's DLLs), never vendored;
    ``on_demand``: DLL names its package loads only where installed (a companion's, by library), never vendored;
    ``from_requirements``: the DLLs of the declared requirements the cell vendors (requirement_dlls), taken from
    there rather than from the redistributables' providers."""
    from_requirements = from_requirements or {}
    facts = facts_of(plan)
    machine = pe.TAG_MACHINES.get(plan.wheel_tags.platform, "AMD64")
    provided = {**cuda_wheels.provided_libraries(plan.declared_libraries), **(beside or {})}
    before = pe.check_wheel(wheel, python=plan.python, machine=machine, provided=provided, on_demand=on_demand)
    if before.bad:
        raise StageFailed(STAGE, "; ".join(b.reason for b in before.bad[:5]))
    floor = vc_runtime.floor(before.files)
    files = [f.path for f in before.files]
    present = [PurePosixPath(f).name for f in files]
    shipped = {name.lower() for name in present}  # torch 2.3.1 ships libiomp5md.dll, which mkl_intel_thread loads
    imported_by = _gaps(before)
    wanted = list(imported_by)
    loaded = dll_providers.runtime_loaded([*present, *wanted], facts.loaded_by_name)
    wanted += loaded
    providers = facts.dll_providers
    located: list[provider_dlls.Located] = []
    for _round in range(MAX_ROUNDS):
        todo = [w for w in wanted if not any(hit.pattern == w for hit in located)]
        if not todo:
            break
        located += [from_requirements[w.lower()] for w in todo if w.lower() in from_requirements]
        todo = [w for w in todo if w.lower() not in from_requirements]
        _refuse_unknown(plan, todo, imported_by)
        try:
            located += provider_dlls.locate(
                todo, providers, cuda=plan.cuda, cudnn=plan.cudnn, python=plan.python, cache_dir=cache_dir, log=log
            ) if todo else []
        except dll_providers.ProviderError as exc:
            raise StageFailed(STAGE, f"cannot repair {wheel.name}: {exc}") from None
        # What the located DLLs import in turn, as they will sit in torch.libs (msvcp140.dll -> vcruntime140_1.dll).
        vendored = [pe.read_pe(hit.path.read_bytes(), f"{LIBS_DIR}/{hit.name}") for hit in located]
        after = pe.resolve(vendored, [*files, *(f"{LIBS_DIR}/{hit.name}" for hit in located)], python=plan.python)
        more = [name for name in _gaps(after) if name not in wanted]
        for name, importers in _gaps(after).items():
            imported_by.setdefault(name, importers)
        more += [p for p in dll_providers.runtime_loaded([*present, *(h.name for h in located)], facts.loaded_by_name)
                 if p not in wanted]  # fmt: skip
        kernels = [p for p in _loaded_by_requirements(plan, [h.name for h in located])
                   if p not in wanted + more and p.lower() not in shipped]  # fmt: skip
        loaded += kernels
        wanted += more + kernels
    for hit in located:
        problem = vc_runtime.too_old(floor, hit.name, pe.file_version(hit.path.read_bytes(), str(hit.path)))
        if problem:
            raise StageFailed(STAGE, f"refusing to vendor {hit.path} ({hit.origin}): {problem}")
    signers = {hit.path: signer_of(hit) for hit in located}
    return Needs(tuple(located), imported_by, tuple(loaded), floor, signers)


def signer_of(hit: provider_dlls.Located) -> str:
    """The vendor signature ``hit`` carries, verified; StageFailed naming the file, the signer found and the one
    expected. A file the data knows as unsigned may lack one (the reason is returned), but not carry a broken one."""
    try:
        if hit.unsigned is not None:
            try:
                return str(authenticode.verify(hit.path)[0])
            except authenticode.NotSigned:
                return f"not signed ({hit.unsigned})"
        if not hit.signer:
            raise authenticode.SignatureError(f"{dll_providers.DATA_FILE} names no signer for provider {hit.provider}")
        return str(authenticode.check_vendor(hit.path, hit.signer))
    except authenticode.SignatureError as exc:
        expected = f"a valid signature by {hit.signer}" if hit.signer else "a signer in the data"
        raise StageFailed(STAGE, f"refusing to vendor {hit.path} ({hit.origin}): {exc}; expected {expected}") from None


def delvewheel_argv(
    wheel: Path, out_dir: Path, add_path: Sequence[Path], include: Sequence[str], exclude: Sequence[str]
) -> list[str]:
    """The delvewheel command of the repair (also what bench/repair.py compares against); ``exclude``: the driver's
    DLLs, which never go into a wheel, and the DLLs the wheel's declared requirements install (mkl: vendoring them
    would put a second MKL beside the one pip installs)."""
    argv = [sys.executable, "-m", "delvewheel", "repair", "--ignore-existing", "--no-mangle-all", "-w", str(out_dir)]
    if add_path:
        argv += ["--add-path", os.pathsep.join(str(p) for p in add_path)]
    if include:
        argv += ["--include", os.pathsep.join(include)]
    # Driver DLLs never go into a wheel, even when a provider directory happens to hold one.
    argv += ["--exclude", os.pathsep.join(sorted(exclude))]
    return [*argv, str(wheel)]


def vendored(
    repaired: Path, located: Sequence[provider_dlls.Located], signers: Mapping[Path, str], libs_dir: str = LIBS_DIR
) -> list[Vendored]:
    """What the repaired wheel holds of each located DLL (delvewheel copies them unchanged into ``libs_dir``)."""
    by_name = {hit.name.lower(): hit for hit in located}
    found: list[Vendored] = []
    with archives.open_zip(repaired) as archive:
        for info in archive.infolist():
            hit = by_name.get(PurePosixPath(info.filename).name.lower())
            if hit is None or info.filename.split("/", 1)[0] != libs_dir:
                continue
            data = archive.read(info)
            wheel = hit.wheel
            found.append(
                Vendored(
                    path=info.filename,
                    sha256=hashlib.sha256(data).hexdigest(),
                    size=len(data),
                    version=pe.file_version(data, info.filename),
                    provider=hit.provider,
                    origin=hit.origin,
                    origin_sha256=wheel.sha256 if wheel else "",
                    origin_url=wheel.url if wheel else "",
                    origin_name=wheel.name if wheel else "",
                    origin_version=wheel.version if wheel else "",
                    license=wheel.license if wheel else "",
                    signer=signers.get(hit.path, ""),
                )
            )
    return found


def runtime_checks(repaired: Path, plan: Plan, loaded: Sequence[str], floor: Floor | None) -> list[Check]:
    """P103: each DLL loaded by name is in the repaired wheel; P104: every VC runtime DLL in it serves the floor."""
    checks: list[Check] = []
    with archives.open_zip(repaired) as archive:
        names = [n for n in archive.namelist() if n.lower().endswith(".dll")]
        for pattern in loaded:
            found = [n for n in names if dll_providers.matches(PurePosixPath(n).name, [pattern])]
            checks.append(
                Check(
                    name=f"ships {pattern} (loaded by name)",
                    status="passed" if found else "failed",
                    message=", ".join(found) if found else f"{pattern} is not in the repaired wheel",
                    code="P103",
                )
            )
        for name in names:
            base = PurePosixPath(name).name
            if not vc_runtime.is_vc_runtime(base) or floor is None:
                continue
            version = pe.file_version(archive.read(name), name)
            problem = vc_runtime.too_old(floor, base, version)
            checks.append(
                Check(
                    name="VC runtime serves the binaries' MSVC",
                    status="failed" if problem else "passed",
                    message=problem or f"{name} {version} >= MSVC {floor.version} ({floor.set_by})",
                    code="P104",
                    file=name,
                )
            )
    return checks
