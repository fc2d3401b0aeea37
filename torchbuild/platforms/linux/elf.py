"""Static import closure of the ELF files in a Linux wheel (or an unpacked tree).

Every DT_NEEDED of every ELF file must resolve, without running anything, to one of:

- a file in the wheel, found through the ELF's RUNPATH (or RPATH when it has no RUNPATH) with ``$ORIGIN``
  expanded to the ELF's own directory, or in the ELF's own directory;
- a system library the manylinux policy of the wheel's platform tag allows (auditwheel's policy data);
- the dynamic loader itself (``ld-linux-x86-64.so.2``), which auditwheel also always allows;
- a documented exclude: driver libraries (libcuda, libnvidia-ml) that come with the NVIDIA driver and must never
  be vendored.

Anything else would be an ``ImportError: ... cannot open shared object file`` on a user's machine.
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.host import archives
from torchbuild.platforms.closure import ClosureFormat, ClosureReport, Missing, Resolved, Unusable
from torchbuild.platforms.linux import auditwheel_api

ELF_MAGIC = b"\x7fELF"

# Libraries that come with the NVIDIA driver on the user's machine. Vendoring them would pin one driver's user-mode
# half to whatever kernel module the user runs (and is not redistributable): never graft, never require in the wheel.
DRIVER_LIBRARIES: Mapping[str, str] = {
    "libcuda.so*": "CUDA driver API, installed with the NVIDIA driver",
    "libnvidia-ml.so*": "NVML, installed with the NVIDIA driver",
}

# The ELF interpreter is never a DT_NEEDED that a wheel can satisfy; auditwheel's policy filter drops these names
# too (ld-linux* on x86_64/aarch64, ld64.so.1/2 on ppc64le/s390x).
LOADER = re.compile(r"^(ld-linux[-\w.]*\.so\.\d+|ld64\.so\.\d+)$")

# What ``import`` and ``dlopen`` load: the closure is enforced for these. Other ELF files are executables (upstream
# wheels ship C++ test binaries under torch/bin and torch/test); their gaps are reported, not enforced.
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")

# e_machine per wheel architecture suffix: an x86_64 wheel must not carry an aarch64 .so.
MACHINES: Mapping[str, str] = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "i686": "EM_386"}



@dataclass(frozen=True)
class ElfInfo:
    """What the dynamic loader reads from one ELF file."""

    path: str  # relative to the wheel's root, '/'-separated
    machine: str  # e_machine, e.g. EM_X86_64
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]

    @property
    def is_shared_object(self) -> bool:
        return SHARED_OBJECT.search(self.path) is not None

    @property
    def search_path(self) -> tuple[str, ...]:
        # ld.so ignores DT_RPATH when DT_RUNPATH is present.
        return self.runpath if self.runpath else self.rpath


def _elf_summary(report: ClosureReport[ElfInfo]) -> str:
    needed = len(report.resolved) + len(report.missing) + len(report.unenforced)
    shared = sum(1 for e in report.files if e.is_shared_object)
    count = report.count
    return (
        f"{len(report.files)} ELF files ({shared} shared objects), {needed} DT_NEEDED entries: "
        f"{count('wheel')} in the wheel via RUNPATH, {count('same-dir')} in the same directory, "
        + (f"{count('dependency')} from declared requirements, " if count("dependency") else "")
        + (f"{count('loaded')} loaded first by the package it extends, " if count("loaded") else "")
        + f"{count('system')} allowed by {report.scope}, {count('loader')} dynamic loader, "
        f"{count('excluded')} driver excludes, {len(report.missing)} missing"
    )


ELF_CLOSURE: ClosureFormat[ElfInfo] = ClosureFormat(
    closure=("ELF import closure", "E100"),
    missing=("ELF dependency resolves", "E101"),
    unenforced=("ELF dependency resolves (executable, not enforced)", "W101"),
    unusable=("ELF file readable for this platform", "E102"),
    openmp=("one OpenMP runtime per process", "E103"),
    summary=_elf_summary,
    in_process=lambda elf: elf.is_shared_object,
)


def _missing(
    file: str, needed: str, searched: tuple[str, ...], elsewhere: tuple[str, ...], executable: bool
) -> Missing:
    where = ", ".join(searched) or "(no RUNPATH/RPATH into the wheel)"
    text = (
        f"{file} needs {needed}, which is neither in the wheel on its search path ({where}) "
        "nor a system library the manylinux policy allows"
    )
    if elsewhere:
        text += f"; the wheel has it at {', '.join(elsewhere)} but the RUNPATH does not reach it"
    return Missing(file, needed, searched, elsewhere, text, executable=executable)


def elf_error() -> type[Exception]:
    """pyelftools' ELFError, for an ``except``: pyelftools (50 ms to import) loads only where an ELF file is read."""
    from elftools.common.exceptions import ELFError

    return ELFError


def read_elf(path: Path, name: str) -> ElfInfo:
    """Parse one ELF file's dynamic segment. ``name`` is its path inside the wheel. Raises ELFError."""
    from elftools.elf.dynamic import DynamicSegment  # pyelftools loads in 50 ms: only where ELF is read
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as handle:
        elf = ELFFile(handle)
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        soname: str | None = None
        for segment in elf.iter_segments():
            if not isinstance(segment, DynamicSegment):
                continue
            # pyelftools sets .needed/.rpath/.runpath/.soname per tag kind; its type stubs do not declare them
            tags: Iterable[Any] = segment.iter_tags()
            for tag in tags:
                kind = tag.entry.d_tag
                if kind == "DT_NEEDED":
                    needed.append(str(tag.needed))
                elif kind == "DT_RPATH":
                    rpath.extend(p for p in str(tag.rpath).split(":") if p)
                elif kind == "DT_RUNPATH":
                    runpath.extend(p for p in str(tag.runpath).split(":") if p)
                elif kind == "DT_SONAME":
                    soname = str(tag.soname)
        return ElfInfo(
            path=name,
            machine=str(elf["e_machine"]),
            soname=soname,
            needed=tuple(needed),
            rpath=tuple(rpath),
            runpath=tuple(runpath),
        )


def _is_elf(head: bytes) -> bool:
    return head[:4] == ELF_MAGIC


# --- resolution ------------------------------------------------------------------------------------------


def _wheel_dir(entry: str, origin: str) -> str | None:
    """A RUNPATH entry as a directory inside the wheel, or None when it points outside (absolute, or above root)."""
    for token in ("${ORIGIN}", "$ORIGIN"):
        if entry.startswith(token):
            joined = posixpath.normpath(posixpath.join(origin, "./" + entry[len(token) :].lstrip("/")))
            if joined == ".." or joined.startswith("../"):
                return None
            return "" if joined == "." else joined
    return None


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def excluded_reason(name: str, excludes: Mapping[str, str]) -> str | None:
    for pattern, reason in excludes.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def resolve(
    elves: Iterable[ElfInfo],
    files: Iterable[str],
    *,
    policy: str,
    system: frozenset[str],
    excludes: Mapping[str, str] = DRIVER_LIBRARIES,
    machine: str | None = None,
    bad: Iterable[Unusable] = (),
    provided: Mapping[str, str] | None = None,
    loaded: Mapping[str, str] | None = None,
) -> ClosureReport[ElfInfo]:
    """Resolve every DT_NEEDED of ``elves`` against the wheel's ``files`` and the allowed system libraries;
    ``provided``: files other wheels install beside it (site-packages paths: the wheel's declared requirements'
    libraries, nvidia/cublas/lib/libcublas.so.12), by who installs them, found on the same search path;
    ``loaded``: library names already in the process before the wheel's own load, by where they come from (a
    companion's extensions need libtorch.so, which ``import torch`` loaded first: ld.so reuses a loaded library of
    that SONAME whatever the search path)."""
    provided = provided or {}
    loaded = loaded or {}
    elves = tuple(sorted(elves, key=lambda e: e.path))
    present = set(files)
    by_name: dict[str, list[str]] = {}
    for f in sorted(present):
        by_name.setdefault(posixpath.basename(f), []).append(f)
    problems = list(bad)
    resolved: list[Resolved] = []
    missing: list[Missing] = []
    unenforced: list[Missing] = []
    for elf in elves:
        if machine is not None and elf.machine != machine:
            problems.append(
                Unusable(elf.path, f"{elf.path} is built for {elf.machine}, the wheel's platform needs {machine}")
            )
            continue
        origin = posixpath.dirname(elf.path)
        dirs = [d for d in (_wheel_dir(e, origin) for e in elf.search_path) if d is not None]
        for needed in elf.needed:
            hit = next((_join(d, needed) for d in dirs if _join(d, needed) in present), None)
            beside = next((_join(d, needed) for d in dirs if _join(d, needed) in provided), None)
            if hit is not None:
                resolved.append(Resolved(elf.path, needed, "wheel", hit))
            elif beside is not None:
                resolved.append(Resolved(elf.path, needed, "dependency", f"{beside}, installed by {provided[beside]}"))
            elif _join(origin, needed) in present:
                resolved.append(Resolved(elf.path, needed, "same-dir", _join(origin, needed)))
            elif needed in loaded:
                resolved.append(Resolved(elf.path, needed, "loaded", loaded[needed]))
            elif needed in system:
                resolved.append(Resolved(elf.path, needed, "system", policy))
            elif LOADER.match(needed):
                resolved.append(Resolved(elf.path, needed, "loader", needed))
            elif (reason := excluded_reason(needed, excludes)) is not None:
                resolved.append(Resolved(elf.path, needed, "excluded", reason))
            else:
                elsewhere = tuple(by_name.get(posixpath.basename(needed), ()))
                gap = _missing(elf.path, needed, tuple(d or "." for d in dirs), elsewhere, not elf.is_shared_object)
                (missing if elf.is_shared_object else unenforced).append(gap)
    return ClosureReport(
        form=ELF_CLOSURE,
        scope=policy,
        files=elves,
        resolved=tuple(resolved),
        missing=tuple(missing),
        bad=tuple(problems),
        unenforced=tuple(unenforced),
    )


# --- the manylinux policy --------------------------------------------------------------------------------


def manylinux_policies(platform_tag: str) -> tuple[Any, Any]:
    """auditwheel's (WheelPolicies, Policy) for a manylinux tag (or a legacy alias such as manylinux2014_x86_64).

    Raises ValueError for a tag that has no manylinux policy (e.g. linux_x86_64, which allows anything).
    """
    arch = next((a for a in auditwheel_api.architectures() if platform_tag.endswith("_" + a.value)), None)
    if arch is None or not platform_tag.startswith("manylinux"):
        raise ValueError(f"'{platform_tag}' is not a manylinux platform tag (e.g. manylinux_2_28_x86_64)")
    policies = auditwheel_api.glibc_policies(arch)
    try:
        return policies, policies.get_policy_by_name(platform_tag)
    except LookupError:
        known = [p.name for p in policies if p.name != policies.linux.name]
        raise ValueError(f"auditwheel has no policy '{platform_tag}'; known: {', '.join(known)}") from None


def policy_for(platform_tag: str) -> tuple[str, frozenset[str], str]:
    """(policy name, allowed system libraries, e_machine) for a manylinux tag, from auditwheel's policy data."""
    policies, policy = manylinux_policies(platform_tag)
    return str(policy.name), frozenset(policy.whitelist), MACHINES.get(policies.architecture.baseline.value, "")


# --- entry points ----------------------------------------------------------------------------------------


def check_tree(
    root: Path,
    platform_tag: str,
    *,
    excludes: Mapping[str, str] = DRIVER_LIBRARIES,
    provided: Mapping[str, str] | None = None,
    loaded: Mapping[str, str] | None = None,
) -> ClosureReport[ElfInfo]:
    """The closure of an unpacked wheel (or any tree laid out as it will be installed)."""
    name, system, machine = policy_for(platform_tag)
    files: list[str] = []
    elves: list[ElfInfo] = []
    bad: list[Unusable] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        files.append(rel)
        with path.open("rb") as handle:
            if not _is_elf(handle.read(4)):
                continue
        try:
            elves.append(read_elf(path, rel))
        except (elf_error(), ValueError, OSError) as exc:
            bad.append(Unusable(rel, f"{rel} is not a readable ELF file: {exc}"))
    return resolve(
        elves, files, policy=name, system=system, excludes=excludes, machine=machine or None, bad=bad,
        provided=provided, loaded=loaded,
    )  # fmt: skip


def kept_path(keep_in: Path, member: str) -> Path:
    """Where check_wheel keeps a member: named by a digest of its name (a member name is not trusted as a path)."""
    return keep_in / hashlib.sha256(member.encode("utf-8")).hexdigest()


def check_wheel(
    wheel: Path,
    platform_tag: str,
    *,
    excludes: Mapping[str, str] = DRIVER_LIBRARIES,
    scratch: Path | None = None,
    keep_in: Path | None = None,
    provided: Mapping[str, str] | None = None,
    loaded: Mapping[str, str] | None = None,
) -> ClosureReport[ElfInfo]:
    """The closure of a wheel file. ELF members are copied out one at a time (the dynamic string table may sit at
    the end of a patchelf-edited file, so a prefix of the member is not enough); with ``keep_in``, each is kept
    there under its member name, for a second reader (manylinux.verdict) not to inflate it again."""
    name, system, machine = policy_for(platform_tag)
    elves: list[ElfInfo] = []
    bad: list[Unusable] = []
    with archives.open_zip(wheel) as archive, tempfile.TemporaryDirectory(dir=scratch, prefix="elf-") as tmp:
        members = [m for m in archive.infolist() if not m.is_dir()]
        files = [m.filename for m in members]
        for member in members:
            copy = Path(tmp) / "member" if keep_in is None else kept_path(keep_in, member.filename)
            with archive.open(member) as src:
                head = src.read(4)
                if not _is_elf(head):
                    continue
                with copy.open("wb") as dst:
                    dst.write(head)
                    shutil.copyfileobj(src, dst, 1 << 20)
            try:
                elves.append(read_elf(copy, member.filename))
            except (elf_error(), ValueError, OSError) as exc:
                bad.append(Unusable(member.filename, f"{member.filename} is not a readable ELF file: {exc}"))
    return resolve(
        elves, files, policy=name, system=system, excludes=excludes, machine=machine or None, bad=bad,
        provided=provided, loaded=loaded,
    )  # fmt: skip
