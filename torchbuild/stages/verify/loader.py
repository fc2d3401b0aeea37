"""The loader check of a win-64 cell's artifacts (TB205, TB108): every .dll and .pyd loaded with LoadLibraryExW by
loadcheck.exe under Wine, with the DLL directories added as Python 3.8+ and torch add them, and the VC runtime
native-only (loadcheck.py, wine.py). It needs no Python: the embeddable CPython's folder is only where python3X.dll
(and the vcruntime140.dll every python.exe ships) are, as python.exe's own folder is on Windows.

- TB205, the wheel: its PE files where pip puts them; DLL directories torch\\lib and torch.libs, and where the wheel
  declares requirements that provide DLLs, those requirements' DLLs from their pinned wheels (Plan.declared_libraries)
  where pip installs them: ``Library\\bin`` (mkl of torch 2.3.x), which torch adds as a DLL directory, or below
  site-packages (the nvidia-* wheels' ``nvidia\\<lib>\\bin``), whose folders a CUDA wheel adds as upstream's do
  (os.add_dll_directory, as cuda-pathfinder finds them). A DLL still missing is named with the requirement that
  installs it (the declared one of its family, else the cell's provider in dll_providers.yaml).
- TB108, the conda package: laid out as conda installs it, with ``Library\\bin`` holding the DLLs of its run
  dependencies from the vendor wheels (environments.py), which torch adds as a DLL directory in a conda environment;
  a run dependency that is one of the wheel's declared requirements gets the DLLs of that requirement's wheel.
- TB113, each companion's conda package the Plan builds (torchvision, torchaudio): laid out in the same prefix
  beside torch's package, its files loaded with torch's DLL directories and its own ``<name>.libs``. A file that
  fails only for DLLs companions.yaml says it loads on demand (torio's FFmpeg extensions: avutil-58.dll ...) is
  accepted and named ("loaded on demand: ... (FFmpeg, not shipped)"); any other missing DLL fails the check.

A file that does not load fails the check naming it, the Windows error and what was missing (a DLL and who needs
it, or DLL.Function). Where Wine, mingw-w64 or a pinned embeddable CPython is missing, both are skipped, saying why.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from torchbuild.conda import extract
from torchbuild.errors import UserError
from torchbuild.host import archives, downloads, pip
from torchbuild.knowledge import cuda_wheels
from torchbuild.knowledge.build_deps import DependencyError
from torchbuild.knowledge.dll_providers import values_for
from torchbuild.knowledge.pypi_to_conda import conda_name
from torchbuild.platforms.windows import environments, loadcheck, python_embed, wine
from torchbuild.results import Check, define, result, skipped

if TYPE_CHECKING:
    from torchbuild.plan import Plan

TB205 = define("TB205", "every DLL and extension of the wheel loads (LoadLibraryExW)")
TB108 = define("TB108", "every DLL and extension loads in the conda layout (LoadLibraryExW)")
TB113 = define("TB113", "every DLL and extension of the companion's package loads beside torch's (LoadLibraryExW)")
PE_LOADED = (".dll", ".pyd")
LIBRARY_BIN_MEMBER = re.compile(r"^[^/]+\.data/data/Library/bin/[^/]+$")  # <prefix>\Library\bin once installed
SITE_MEMBER = re.compile(r"^[^/]+\.data/(purelib|platlib)/")  # below site-packages once installed


def _pe_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.suffix.lower() in PE_LOADED)


def _unpack_pe(wheel: Path, dest: Path) -> None:
    """Only the wheel's .dll and .pyd files, where pip puts them (all that a load needs)."""
    with archives.open_zip(wheel) as archive:
        for member in archive.infolist():
            parts = PurePosixPath(member.filename).parts
            inside = ".." not in parts and not member.filename.startswith("/")
            if member.filename.lower().endswith(PE_LOADED) and inside:
                target = dest.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, target.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)


def _requirement_dlls(plan: Plan, prefix: Path, cache_dir: Path, log: Path, site: str = "") -> list[str]:
    """The DLLs of the wheel's declared requirements where pip installs them in ``prefix`` (``site``: its
    site-packages, relative; "" where ``prefix`` is site-packages itself): ``Library\\bin`` for .data/data members,
    below site-packages for the others (their wheels fetched once by sha256). The DLL directories they add."""
    dirs: list[str] = []
    target_args = pip.target_args(plan.python, None, [plan.wheel_tags.platform])
    for wheel in plan.declared_libraries:
        try:
            root = downloads.requirement_libraries(wheel, target_args, cache_dir, log)
        except DependencyError as exc:
            raise UserError(str(exc)) from None
        for member in wheel.libraries:
            if not member.lower().endswith(".dll"):
                continue
            if LIBRARY_BIN_MEMBER.search(member):
                where = environments.LIBRARY_BIN
            elif ".data/data/" in member:
                continue
            else:
                where = str(PurePosixPath(site, SITE_MEMBER.sub("", member)).parent)
            target = prefix / where / PurePosixPath(member).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / member, target)
            dirs += [] if where in dirs else [where]
    return dirs


def installed_by(plan: Plan, missing: str) -> str:
    """Which requirement installs the DLL of a ``missing`` entry ("x.dll (needed by y)"), for the failure."""
    dll = missing.split(" ", 1)[0]
    if not dll.lower().endswith(".dll"):
        return ""
    hint = cuda_wheels.should_have_provided(dll, plan.declared_libraries)
    if hint.startswith("the declared requirement"):
        return f"{dll}: {hint}"
    provider = plan.windows.dll_providers.provider_for(dll) if plan.windows else None
    requirement = provider.requirement(values_for(plan.cuda, plan.cudnn)) if provider else None
    if requirement is None or not plan.declared_libraries:
        return ""
    declared = ", ".join(w.pin for w in plan.declared_libraries)
    return f"{dll} is installed by {requirement} (dll_providers.yaml), which is not among the requirements ({declared})"


def _verdict(
    plan: Plan,
    code: str,
    artifact: Path,
    run: loadcheck.Run,
    where: str,
    log: Path,
    declared: str = "",
    dirs: Sequence[str] = (),
) -> Check:
    problems = [r.describe() for r in run.failed]
    hints = [installed_by(plan, m) for r in run.failed for m in r.missing]
    problems += list(dict.fromkeys(h for h in hints if h))
    note = f"{len(run.results)} files loaded {where} in {run.seconds:.1f} s, the VC runtime native-only"
    note += f"; the DLLs of the declared requirements {declared} where pip installs them" if declared else ""
    note += f" ({', '.join(str(PureWindowsPath(d)) for d in dirs)})" if declared and dirs else ""
    if run.attempts > 1:
        note += f" (the helper printed nothing on its first start and was started again; both outputs in {log.name})"
    return result(code, artifact, problems, note)


def loader_checks(
    plan: Plan,
    wheel: Path | None,
    conda: Path | None,
    work: Path,
    cache_dir: Path,
    log: Path,
    companions: Mapping[str, Path] | None = None,
) -> list[Check]:
    """TB205 for the wheel, TB108 for the conda package, TB113 for each of ``companions`` (name -> its conda package)
    beside it (win-64 cells only)."""
    windows = plan.windows
    if windows is None:
        return []
    beside = dict(companions or {}) if conda is not None else {}
    wanted = [(code, path) for code, path in ((TB205, wheel), (TB108, conda)) if path is not None]
    wanted += [(TB113, path) for path in beside.values()]

    def skip(reason: str) -> list[Check]:
        return [skipped(code, path, f"skipped: {reason}") for code, path in wanted]

    found = wine.find()
    if found is None:
        return skip(f"needs a win-64 host or Wine ({wine.INSTALL_HINT})")
    if windows.embeddable is None:
        return skip(windows.embeddable_missing)
    try:
        exe = loadcheck.build(cache_dir, log)
        embedded = python_embed.provision(windows.embeddable, cache_dir, show_progress=False)
    except loadcheck.Unavailable as exc:
        return skip(str(exc))
    where = f"under {found.label} (python{embedded.tag}.dll from {embedded.pinned.label})"
    base = work / "loadcheck"
    shutil.rmtree(base, ignore_errors=True)
    checks: list[Check] = []
    try:
        prefix = wine.fresh_prefix(found, cache_dir, base / "wineprefix")
        with wine.Session(found, prefix) as session:
            if wheel is not None:
                tree = base / "wheel"
                _unpack_pe(wheel, tree)
                files = _pe_files(tree)
                theirs = _requirement_dlls(plan, tree, cache_dir, log)
                dirs = [*windows.dll_search_dirs, *theirs]
                run = loadcheck.check(session, exe, tree, files, python_dir=str(embedded.root), dll_dirs=dirs)
                run.write_log(log, f"the wheel {wheel.name}")
                declared = ", ".join(w.pin for w in plan.declared_libraries)
                checks.append(_verdict(plan, TB205, wheel, run, where, log, declared, theirs))
            if conda is not None:
                check, dirs = _conda(plan, conda, base / "conda", session, exe, embedded, cache_dir, log, where)
                checks.append(check)
                for name, package in beside.items():
                    checks.append(_companion(plan, name, package, base / "conda", session, exe, dirs, log, where))
    except UserError as exc:
        checks += [result(code, path, [f"the loader check could not run: {exc}"]) for code, path in wanted
                   if not any(c.code == code for c in checks)]  # fmt: skip
    shutil.rmtree(base, ignore_errors=True)
    return checks


def _conda(
    plan: Plan,
    conda: Path,
    root: Path,
    session: wine.Session,
    exe: Path,
    embedded: python_embed.Embedded,
    cache_dir: Path,
    log: Path,
    where: str,
) -> tuple[Check, list[str]]:
    """TB108, and the DLL directories it loaded with (a companion's load adds its own)."""
    environments.python_env(embedded, root)
    python_files = set(_pe_files(root))
    extract.extract_package(conda, root)
    windows = plan.windows
    assert windows is not None
    names = {w.name: conda_name(plan.conda.pypi_names, w.name).conda for w in plan.declared_libraries}
    provided = cuda_wheels.left_to_vendor_wheels(plan.conda.provided_dlls, plan.declared_libraries, names)
    extra_dirs = _requirement_dlls(plan, root, cache_dir, log, plan.conda.site_packages)
    library = environments.library_bin(
        root, provided, windows.dll_providers, cuda=plan.cuda, cudnn=plan.cudnn, python=plan.python,
        cache_dir=cache_dir, log=log,
    )
    extra_dirs = [d for d in extra_dirs if d != environments.LIBRARY_BIN]  # the requirements' site-packages folders
    theirs = tuple(f"{d}/" for d in (environments.LIBRARY_BIN, *extra_dirs))
    files = [f for f in _pe_files(root) if f not in python_files and not f.startswith(theirs)]
    site = plan.conda.site_packages
    dirs: Sequence[str] = [f"{site}/{d}" for d in windows.dll_search_dirs] + [environments.LIBRARY_BIN, *extra_dirs]
    run = loadcheck.check(session, exe, root, files, python_dir=".", dll_dirs=dirs)
    run.write_log(log, f"the conda layout of {conda.name}")
    declared = ", ".join(w.pin for w in plan.declared_libraries)
    check = _verdict(plan, TB108, conda, run, where, log, declared, [environments.LIBRARY_BIN, *extra_dirs])
    if check.status == "passed":
        return Check(check.name, check.status, f"{check.message}; Library\\bin: {library.describe()}", check.code,
                     check.file), list(dirs)  # fmt: skip
    return check, list(dirs)


def on_demand_split(
    failed: Sequence[loadcheck.Loaded], on_demand: Mapping[str, str]
) -> tuple[list[loadcheck.Loaded], list[loadcheck.Loaded]]:
    """The failed loads that failed only for DLLs loaded on demand (``on_demand``: DLL name, lower case -> library;
    error 126 and every missing DLL one of them), and the others."""
    accepted, others = [], []
    for loaded in failed:
        names = [m.split(" ", 1)[0].lower() for m in loaded.missing]
        if loaded.code == 126 and names and all(n in on_demand for n in names):
            accepted.append(loaded)
        else:
            others.append(loaded)
    return accepted, others


def on_demand_note(accepted: Sequence[loadcheck.Loaded], on_demand: Mapping[str, str]) -> str:
    """"loaded on demand: avcodec-58.dll, ... (FFmpeg, not shipped) by torio/lib/libtorio_ffmpeg6.pyd, ..."."""
    by_library: dict[str, set[str]] = {}
    for loaded in accepted:
        for missing in loaded.missing:
            name = missing.split(" ", 1)[0].lower()
            by_library.setdefault(on_demand[name], set()).add(name)
    files = ", ".join(loaded.file for loaded in accepted)
    return "; ".join(
        f"loaded on demand: {', '.join(sorted(names))} ({library}, not shipped) by {files}"
        for library, names in sorted(by_library.items())
    )


def _companion(
    plan: Plan,
    name: str,
    package: Path,
    root: Path,
    session: wine.Session,
    exe: Path,
    dirs: Sequence[str],
    log: Path,
    where: str,
) -> Check:
    """TB113: ``package`` laid out in the conda layout ``root`` that holds torch's package, its own files loaded."""
    companion = next(p for p in plan.packages if p.name == name)
    before = set(_pe_files(root))
    extract.extract_package(package, root)
    files = [f for f in _pe_files(root) if f not in before]
    own = f"{plan.conda.site_packages}/{name}.libs"
    run = loadcheck.check(session, exe, root, files, python_dir=".", dll_dirs=[*dirs, own])
    run.write_log(log, f"the conda layout of {package.name} beside torch's")
    accepted, failed = on_demand_split(run.failed, companion.on_demand_dlls)
    note = f"{len(run.results)} files loaded beside torch's package {where}, the VC runtime native-only"
    if accepted:
        note += "; " + on_demand_note(accepted, companion.on_demand_dlls)
    return result(TB113, package, [r.describe() for r in failed], note)
