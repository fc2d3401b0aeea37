"""Static import closure of the PE files (.dll, .pyd, .exe) in a Windows wheel (or an unpacked tree).

Every import of every .dll and .pyd, delay-load imports included, must resolve, without running anything, to:

- a DLL in the wheel, in the importer's own directory or in a directory the package puts on the DLL search path
  when it is imported (``search_dirs`` in torchbuild/data/dll_providers.yaml: torch\\lib, delvewheel's torch.libs);
- a DLL that the Python loading the extension ships (pythonXY.dll of the Plan's Python, vcruntime140.dll);
- a Windows system DLL (kernel32.dll, ..., the api-ms-win-* API sets);
- a driver DLL (nvcuda.dll, nvml.dll): installed with the NVIDIA driver, never in the wheel.

Anything else is the user's ``ImportError: DLL load failed while importing _C``. Names compare case-insensitively,
as Windows does. Every PE file must also be built for the wheel's machine (AMD64 for win_amd64).

Executables (.exe) are started as their own processes, where neither Python's directory nor the package's DLL
directories are searched: their gaps are reported, not enforced.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torchbuild.host import archives
from torchbuild.knowledge import dll_providers
from torchbuild.platforms.closure import ClosureFormat, ClosureReport, Missing, Resolved, Unusable
from torchbuild.platforms.windows import delvewheel_api

PE_MAGIC = b"MZ"
PE_SUFFIXES = (".dll", ".pyd", ".exe")
LOADED_BY_IMPORT = (".dll", ".pyd")

# IMAGE_FILE_HEADER.Machine values (winnt.h) by the names users see in dumpbin.
MACHINES: Mapping[int, str] = {0x8664: "AMD64", 0x14C: "I386", 0xAA64: "ARM64", 0x1C4: "ARMNT"}
# What each wheel platform tag needs.
TAG_MACHINES: Mapping[str, str] = {"win_amd64": "AMD64", "win32": "I386", "win_arm64": "ARM64"}



@dataclass(frozen=True)
class SystemSet:
    """The DLLs a wheel may import without shipping them: Windows' own (delvewheel's maintained list for the
    machine, plus what torchbuild/data/dll_providers.yaml adds with its reasons), the Python's and the driver's."""

    system: frozenset[str]  # lower-case names
    patterns: tuple[re.Pattern[str], ...]  # API sets (api-ms-win-*, ext-ms-win-*) and the like
    python: tuple[str, ...]  # with {py}
    driver: frozenset[str]
    search_dirs: tuple[str, ...]

    def python_dlls(self, python: str) -> frozenset[str]:
        py = python.replace(".", "")
        return frozenset(name.format(py=py).lower() for name in self.python)

    def is_system(self, name: str) -> bool:
        low = name.lower()
        return low in self.system or any(p.fullmatch(low) for p in self.patterns)


# delvewheel's list also ignores the DLL of every interpreter (python3XY.dll, libpypy...): those are not Windows'
# DLLs, and which one an extension may import depends on the Plan's Python (the ``python`` entries of the data).
INTERPRETER_DLLS = ("python311.dll", "python3.dll", "libpypy3.9-c.dll", "python-native.dll")


def windows_dlls(machine: str) -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """delvewheel's list of the DLLs on every Windows 7 SP1+ of ``machine`` (1,400+ names for AMD64), and its
    name patterns for them (API sets), less the interpreters'. delvewheel keeps the list from real Windows installs;
    we do not copy it (delvewheel_api.py reads it)."""
    names, regexes = delvewheel_api.system_dlls(machine)
    patterns = tuple(rx for rx in regexes if not any(rx.fullmatch(name) for name in INTERPRETER_DLLS))
    return names, patterns


@functools.cache
def load_system_set(machine: str = "AMD64") -> SystemSet:
    """delvewheel's list for ``machine`` and what data/dll_providers.yaml adds (knowledge/dll_providers.py)."""
    data = dll_providers.load().system
    names, patterns = windows_dlls(machine)
    return SystemSet(
        system=names | frozenset(data.extra),
        patterns=patterns + tuple(re.compile(p) for p in data.extra_patterns),
        python=data.python,
        driver=frozenset(data.driver),
        search_dirs=data.search_dirs,
    )


class PeError(ValueError):
    """A file that is not a readable PE image."""


@dataclass(frozen=True)
class PeInfo:
    """What the Windows loader reads from one PE file."""

    path: str  # relative to the wheel's root, '/'-separated
    machine: str  # AMD64, I386, ... or 0x.... for others
    imports: tuple[str, ...]
    delay_imports: tuple[str, ...]
    linker: str = ""  # the linker version of the optional header, e.g. 14.42 (MSVC 14.42): which runtime it needs

    @property
    def loaded_by_import(self) -> bool:
        return self.path.lower().endswith(LOADED_BY_IMPORT)


def machine_name(value: int) -> str:
    return MACHINES.get(value, f"0x{value:04x}")


def read_pe(data: bytes, name: str) -> PeInfo:
    """Parse the import and delay-import tables of one PE image. Raises PeError."""
    import pefile  # 40 ms to import: only where a PE file is read

    try:
        pe = pefile.PE(data=data, fast_load=True)
        # DLL names only: pefile stops reading a DLL's imports after 8,192 symbols (MAX_IMPORT_SYMBOLS), and
        # torch_python.dll imports more than that from torch_cpu.dll alone, which would cut off every DLL after it.
        pe.parse_data_directories(
            directories=[
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
            ],
            import_dllnames_only=True,
        )
    except pefile.PEFormatError as exc:
        raise PeError(f"{name} is not a readable PE file: {exc.value}") from None
    try:
        imports = tuple(e.dll.decode("ascii") for e in getattr(pe, "DIRECTORY_ENTRY_IMPORT", ()))
        delay = tuple(e.dll.decode("ascii") for e in getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", ()))
        header = pe.OPTIONAL_HEADER
        linker = f"{header.MajorLinkerVersion}.{header.MinorLinkerVersion}"
        machine = machine_name(pe.FILE_HEADER.Machine)
        return PeInfo(path=name, machine=machine, imports=imports, delay_imports=delay, linker=linker)
    finally:
        pe.close()


def file_version(data: bytes, name: str) -> str | None:
    """The FileVersion of a PE's version resource (VS_FIXEDFILEINFO), e.g. 14.44.35211.0; None without one.
    Raises PeError."""
    import pefile  # 40 ms to import: only where a PE file is read

    try:
        pe = pefile.PE(data=data, fast_load=True)
        pe.parse_data_directories(directories=[pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_RESOURCE"]])
    except pefile.PEFormatError as exc:
        raise PeError(f"{name} is not a readable PE file: {exc.value}") from None
    try:
        fixed = getattr(pe, "VS_FIXEDFILEINFO", None) or []
        if not fixed:
            return None
        ms, ls = fixed[0].FileVersionMS, fixed[0].FileVersionLS
        return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}.{ls & 0xFFFF}"
    finally:
        pe.close()


def machine_of(path: Path) -> str:
    """The machine type of a PE file on disk (reads the headers only). Raises PeError."""
    import pefile  # 40 ms to import: only where a PE file is read

    try:
        pe = pefile.PE(str(path), fast_load=True)
    except (pefile.PEFormatError, OSError) as exc:
        raise PeError(f"{path} is not a readable PE file: {exc}") from None
    try:
        return machine_name(pe.FILE_HEADER.Machine)
    finally:
        pe.close()


# --- the report ------------------------------------------------------------------------------------------


def _pe_summary(report: ClosureReport[PeInfo]) -> str:
    imports = len(report.resolved) + len(report.missing) + len(report.unenforced)
    delay = sum(r.delay for r in report.resolved) + sum(m.delay for m in report.missing)
    count = report.count
    text = (
        f"{len(report.files)} PE files ({report.scope}), {imports} imports ({delay} delay-load): "
        f"{count('wheel')} in the wheel, {count('python')} shipped with Python, "
        f"{count('system')} Windows system, {count('driver')} NVIDIA driver, "
        + (f"{count('dependency')} from run dependencies, " if count("dependency") else "")
        + f"{len(report.missing)} missing"
    )
    if report.missing:
        text += f" ({', '.join(report.missing_names)})"
    return text + on_demand_note(report)


def on_demand_note(report: ClosureReport[PeInfo]) -> str:
    """"; loaded on demand: avcodec-58.dll, ... (FFmpeg, not shipped)" for the imports resolved as loaded on demand
    (by library), "" where there are none."""
    by_library: dict[str, set[str]] = {}
    for r in report.resolved:
        if r.via == ON_DEMAND:
            by_library.setdefault(r.target, set()).add(r.needed.lower())
    return "".join(
        f"; loaded on demand: {', '.join(sorted(names))} ({library}, not shipped)"
        for library, names in sorted(by_library.items())
    )


PE_CLOSURE: ClosureFormat[PeInfo] = ClosureFormat(
    closure=("PE import closure", "P100"),
    missing=("DLL import resolves", "P101"),
    unenforced=("DLL import resolves (executable, not enforced)", "W201"),
    unusable=("PE file is for this platform", "P102"),
    openmp=("one OpenMP runtime per process", "P103"),
    summary=_pe_summary,
    in_process=lambda pe: pe.loaded_by_import,
)


def _missing(file: str, needed: str, searched: tuple[str, ...], elsewhere: tuple[str, ...], delay: bool,
             executable: bool) -> Missing:  # fmt: skip
    kind = "delay-loads" if delay else "imports"
    text = (
        f"{file} {kind} {needed}, which is neither in the wheel on its DLL search path "
        f"({', '.join(searched)}) nor shipped with Python nor a Windows system DLL: "
        f"'DLL load failed' on machines without it"
    )
    if elsewhere:
        text += f"; the wheel has it at {', '.join(elsewhere)}, which is not on the search path"
    return Missing(file, needed, searched, elsewhere, text, delay, executable)


# --- resolution ------------------------------------------------------------------------------------------


ON_DEMAND = "on demand"  # Resolved.via of an import its package loads only where the library is installed


def _provider(name: str, provided: Mapping[str, str] | None) -> str | None:
    return next((pkg for pattern, pkg in (provided or {}).items() if fnmatch.fnmatch(name, pattern.lower())), None)


def resolve(
    pes: Iterable[PeInfo],
    files: Iterable[str],
    *,
    python: str,
    machine: str = "AMD64",
    system: SystemSet | None = None,
    search_dirs: Sequence[str] | None = None,
    bad: Iterable[Unusable] = (),
    provided: Mapping[str, str] | None = None,
    on_demand: Mapping[str, str] | None = None,
) -> ClosureReport[PeInfo]:
    """Resolve every import of ``pes`` against the wheel's ``files`` and the DLLs a Windows machine has.
    ``provided``: DLL patterns the environment's other packages install (a conda package's run dependencies), by
    package. ``on_demand``: DLL names (lower case) -> the library they belong to (FFmpeg), which the package loads
    only where installed: resolved as such (``ON_DEMAND``, target the library) and named in the summary."""
    on_demand = {k.lower(): v for k, v in (on_demand or {}).items()}
    system = system or load_system_set(machine)
    dirs = tuple(search_dirs if search_dirs is not None else system.search_dirs)
    python_dlls = system.python_dlls(python)
    pes = tuple(sorted(pes, key=lambda p: p.path))
    by_dir: dict[str, dict[str, str]] = {}  # directory (lower) -> lower name -> path
    by_name: dict[str, list[str]] = {}
    for f in sorted(files):
        if f.lower().endswith(PE_SUFFIXES):
            directory, name = posixpath.split(f)
            by_dir.setdefault(directory.lower(), {})[name.lower()] = f
            by_name.setdefault(name.lower(), []).append(f)
    problems = list(bad)
    resolved: list[Resolved] = []
    missing: list[Missing] = []
    unenforced: list[Missing] = []
    for pe in pes:
        if pe.machine != machine:
            reason = f"{pe.path} is built for {pe.machine}; the wheel's platform needs {machine}"
            problems.append(Unusable(pe.path, reason))
            continue
        own = posixpath.dirname(pe.path)
        searched = (own, *(d for d in dirs if d.lower() != own.lower())) if pe.loaded_by_import else (own,)
        for needed, delay in [(n, False) for n in pe.imports] + [(n, True) for n in pe.delay_imports]:
            low = needed.lower()
            hit = next((by_dir[d.lower()][low] for d in searched if low in by_dir.get(d.lower(), {})), None)
            if hit is not None:
                resolved.append(Resolved(pe.path, needed, "wheel", hit, delay))
            elif low in python_dlls and pe.loaded_by_import:
                resolved.append(Resolved(pe.path, needed, "python", f"ships with Python {python}", delay))
            elif system.is_system(low):
                resolved.append(Resolved(pe.path, needed, "system", "Windows system DLL", delay))
            elif low in system.driver:
                resolved.append(Resolved(pe.path, needed, "driver", "installed with the NVIDIA driver", delay))
            elif (package := _provider(low, provided)) is not None:
                resolved.append(Resolved(pe.path, needed, "dependency", f"installed by {package}", delay))
            elif low in on_demand:
                resolved.append(Resolved(pe.path, needed, ON_DEMAND, on_demand[low], delay))
            else:
                elsewhere = tuple(by_name.get(low, ()))
                places = tuple(d or "." for d in searched)
                gap = _missing(pe.path, needed, places, elsewhere, delay, not pe.loaded_by_import)
                (missing if pe.loaded_by_import else unenforced).append(gap)
    return ClosureReport(
        form=PE_CLOSURE,
        scope=machine,
        files=pes,
        resolved=tuple(resolved),
        missing=tuple(missing),
        bad=tuple(problems),
        unenforced=tuple(unenforced),
    )


# --- entry points ----------------------------------------------------------------------------------------


def _is_pe_name(name: str) -> bool:
    return name.lower().endswith(PE_SUFFIXES)


def check_tree(
    root: Path,
    *,
    python: str,
    machine: str = "AMD64",
    search_dirs: Sequence[str] | None = None,
    provided: Mapping[str, str] | None = None,
    on_demand: Mapping[str, str] | None = None,
) -> ClosureReport[PeInfo]:
    """The closure of an unpacked wheel (or any tree laid out as it will be installed); ``provided``: DLL patterns
    other packages install (the wheel's declared requirements), by who installs them."""
    files: list[str] = []
    pes: list[PeInfo] = []
    bad: list[Unusable] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        files.append(rel)
        if _is_pe_name(rel):
            try:
                pes.append(read_pe(path.read_bytes(), rel))
            except PeError as exc:
                bad.append(Unusable(rel, str(exc)))
    return resolve(pes, files, python=python, machine=machine, search_dirs=search_dirs, bad=bad, provided=provided,
                   on_demand=on_demand)  # fmt: skip


def check_wheel(
    wheel: Path,
    *,
    python: str,
    machine: str = "AMD64",
    search_dirs: Sequence[str] | None = None,
    provided: Mapping[str, str] | None = None,
    on_demand: Mapping[str, str] | None = None,
) -> ClosureReport[PeInfo]:
    """The closure of a wheel file; each PE member is read into memory in turn (``provided``, ``on_demand``: as
    resolve's)."""
    pes: list[PeInfo] = []
    bad: list[Unusable] = []
    with archives.open_zip(wheel) as archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        files = [m.filename for m in members]
        for member in members:
            if not _is_pe_name(member.filename):
                continue
            data = archive.read(member)
            if data[:2] != PE_MAGIC:
                bad.append(Unusable(member.filename, f"{member.filename} has a PE suffix but no MZ header"))
                continue
            try:
                pes.append(read_pe(data, member.filename))
            except PeError as exc:
                bad.append(Unusable(member.filename, str(exc)))
    return resolve(pes, files, python=python, machine=machine, search_dirs=search_dirs, bad=bad, provided=provided,
                   on_demand=on_demand)  # fmt: skip
