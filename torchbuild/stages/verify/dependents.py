"""verify of the conda package of a package built beside torch (``ShippedPackage.links_against``: torchvision,
torchaudio), read back from disk, in the environment it
shares with torch's package:

- the package checks torch's package gets (conda-verify's C11xx, torchbuild's TB10x: checks/package.py);
- TB111: it is the package the Plan names (name, version, build string) and its run requirements hold the Plan's,
  among them the cell's exact pytorch build (version AND build string), so that no solve pairs it with another torch;
- TB112: every import of its DLLs and extensions resolves in a conda environment holding it and torch's package:
  inside itself (the importer's folder, ``<name>.libs``), in torch's package (torch/lib, torch.libs: the files its
  info/paths.json lists), to what a run dependency installs (Library/bin), or to Python's, Windows' or the driver's;
  the DLLs companions.yaml says it loads on demand (torchaudio's FFmpeg DLLs) are accepted and named. On linux-64
  the same for its ELF files' DT_NEEDED, unpacked as conda links them: inside the package, to torch's package's
  libraries (loaded by ``import torch`` first) or to the libraries of torch's declared requirements.

- TB114: ``import torch, <companions>`` loads one OpenMP runtime: the runtimes the packages' binaries import, torch's
  included (with what its declared requirements' libraries load in turn), counted by name across them (each
  package's own P103 sees only itself); upstream's recorded set passes where torch's wheel is upstream's own.

The joint solve (TB302: ``pytorch <companions>`` picks these builds together) is the verify stage's solve_check.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from torchbuild.conda.archive import TB100, CondaArchive, PackageUnreadable, paths_json, read_package
from torchbuild.conda.checks.package import run_checks
from torchbuild.conda.extract import extract_package
from torchbuild.knowledge import cuda_wheels
from torchbuild.plan import Plan, ShippedPackage
from torchbuild.platforms.closure import OpenMpRuntime, UpstreamOpenMp, joint_openmp
from torchbuild.platforms.linux import elf
from torchbuild.platforms.windows import pe
from torchbuild.results import Artifact, Check, define, result, skipped
from torchbuild.stages.verify.environment import LIBRARY_BIN, SEARCHED

TB111 = define("TB111", "the companion's package is the Plan's and pins the cell's exact pytorch build")
TB112 = define("TB112", "every DLL (linux-64: DT_NEEDED) of the companion's package resolves beside torch's package")
TB114 = define("TB114", "one OpenMP runtime in a process that imports torch and its companions")


def plan_problems(pkg: CondaArchive, plan: Plan, shipped: ShippedPackage) -> list[str]:
    """TB111's problems: the file, index.json's name, version, build and depends against the Plan."""
    problems = []
    if pkg.path.stem.removesuffix(".tar") != shipped.conda.stem:
        problems.append(f"file name {pkg.path.name}, the Plan's is {shipped.conda.filename}")
    wanted = {"name": shipped.conda.name, "version": shipped.conda.version, "build": shipped.conda.build_string}
    problems += [
        f"index.json {key} is {pkg.index.get(key)!r}, the Plan's is {value!r}"
        for key, value in wanted.items()
        if pkg.index.get(key) != value
    ]
    depends = [str(d) for d in pkg.index.get("depends") or []]
    missing = [spec for spec in shipped.conda.depends if spec not in depends]
    if missing:
        problems.append(f"index.json depends lacks the Plan's {', '.join(missing)} (it has {', '.join(depends)})")
    others = [d for d in depends if d.split()[0] == plan.root.conda.name and d not in shipped.conda.depends]
    if others:
        problems.append(f"index.json depends names {plan.root.conda.name} again, loosely: {', '.join(others)}")
    return problems


def torch_files(torch_package: Path) -> list[str]:
    """The files torch's package installs (its info/paths.json, read without its payload)."""
    entries, problem = paths_json(read_package(torch_package, payload=False))
    if problem:
        raise PackageUnreadable(f"{torch_package.name}: {problem}")
    return [str(entry["_path"]) for entry in entries]


def elf_closure_check(pkg: CondaArchive, plan: Plan, beside: Sequence[str]) -> tuple[Check, tuple[OpenMpRuntime, ...]]:
    """TB112 on linux-64: the companion's ELF files, unpacked as conda links them, resolve inside the package, to
    torch's package's libraries (``beside``: ``import torch`` loads them first) or to the libraries of torch's
    declared requirements (its CUDA runtime: in a conda environment from the run dependencies that provide them)."""
    loaded = {
        PurePosixPath(path).name: f"{path}, installed by {who} (torch's declared requirement)"
        for path, who in cuda_wheels.site_packages_libraries(plan.declared_libraries).items()
    }
    loaded.update({PurePosixPath(f).name: f"{f} in torch's package" for f in beside if elf.SHARED_OBJECT.search(f)})
    with tempfile.TemporaryDirectory(prefix="tb112-") as tmp:
        extract_package(pkg.path, Path(tmp))
        closure = elf.check_tree(Path(tmp), plan.wheel_tags.platform, loaded=loaded)
    gaps = [m.message.replace("in the wheel", "in the environment") for m in closure.missing]
    from_torch = sorted({r.needed for r in closure.resolved if r.via == "loaded" and "torch's package" in r.target})
    note = f"{closure.summary()}; from torch's package: {', '.join(from_torch) or 'nothing'}"
    return result(TB112, pkg.path, gaps + [b.reason for b in closure.bad], note), closure.openmp_runtimes()


def closure_check(
    pkg: CondaArchive, plan: Plan, shipped: ShippedPackage, beside: Sequence[str]
) -> tuple[Check, tuple[OpenMpRuntime, ...]]:
    """TB112 of the cell's library format (its platform's repairer: auditwheel for ELF, delvewheel for PE)."""
    if plan.platform_module.repair_tool == "auditwheel":
        return elf_closure_check(pkg, plan, beside)
    return pe_closure_check(pkg, plan, shipped, beside)


def pe_closure_check(
    pkg: CondaArchive, plan: Plan, shipped: ShippedPackage, beside: Sequence[str]
) -> tuple[Check, tuple[OpenMpRuntime, ...]]:
    """TB112: the companion's PE files resolve with torch's package's files (``beside``) in the same prefix; and the
    OpenMP runtimes they import."""
    site = plan.conda.site_packages
    files = [m.name for m in pkg.files()]
    pes = [m.pe for m in pkg.files() if m.pe is not None]
    searched = [f"{site}/{d}" for d in (*SEARCHED, f"{shipped.name}.libs")] + [LIBRARY_BIN]
    closure = pe.resolve(
        pes, [*files, *beside], python=plan.python, search_dirs=searched, provided=plan.conda.provided_dlls,
        on_demand=shipped.on_demand_dlls,
    )  # fmt: skip
    gaps = [m.message.replace("in the wheel", "in the environment") for m in closure.missing]
    beside_set = set(beside)
    from_torch = sorted({r.needed.lower() for r in closure.resolved if r.target in beside_set})
    note = f"{closure.summary()}; from torch's package: {', '.join(from_torch) or 'nothing'}"
    return result(TB112, pkg.path, gaps + [b.reason for b in closure.bad], note), closure.openmp_runtimes()


def joint_openmp_check(
    where: Path, runtimes: Mapping[str, Sequence[OpenMpRuntime]], upstream: UpstreamOpenMp | None = None
) -> Check:
    """TB114: ``import torch, <companions>`` has one OpenMP runtime in its process (each package's own P103 sees only
    itself: torch 2.5.1's torch_cpu.dll imports libiomp5md.dll, torchaudio 2.5.1's libtorchaudio.pyd vcomp140.dll);
    ``upstream``: the set upstream's own torch wheel loads, passed as it ships it where the process has exactly it."""
    problem, line = joint_openmp(runtimes, upstream)
    return result(TB114, where, [problem] if problem else [], line)


def dependent_checks(
    plan: Plan,
    packages: Mapping[str, Artifact],
    torch_package: Artifact | None,
    torch_openmp: Sequence[OpenMpRuntime] | None = None,
    upstream: UpstreamOpenMp | None = None,
) -> list[Check]:
    """Every check of each companion package in ``packages`` (companion name -> its artifact), and TB114 over torch's
    package (``torch_openmp``: the OpenMP runtimes its binaries import; None where not read) and them."""
    checks: list[Check] = []
    openmp: dict[str, Sequence[OpenMpRuntime]] = {} if torch_openmp is None else {"torch": torch_openmp}
    beside: list[str] | None = None
    for shipped in plan.dependents:
        artifact = packages.get(shipped.name)
        if artifact is None:
            continue
        try:
            pkg = read_package(artifact.path)
        except PackageUnreadable as exc:
            checks.append(result(TB100, artifact.path, [str(exc)]))
            continue
        checks += [result(TB100, pkg.path, [], f"{pkg.format}, {len(pkg.files()):,} payload files"), *run_checks(pkg)]
        checks.append(result(TB111, pkg.path, plan_problems(pkg, plan, shipped), ", ".join(shipped.conda.depends)))
        if torch_package is None:
            checks.append(skipped(TB112, pkg.path, "no conda package of torch to resolve against"))
            continue
        beside = beside if beside is not None else torch_files(torch_package.path)
        check, openmp[shipped.name] = closure_check(pkg, plan, shipped, beside)
        checks.append(check)
    if torch_package is not None and "torch" in openmp and len(openmp) > 1:
        checks.append(joint_openmp_check(torch_package.path, openmp, upstream))
    return checks
