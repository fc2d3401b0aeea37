"""The import closure of a wheel's binaries, one report type for PE (platforms/windows/pe.py) and ELF
(platforms/linux/elf.py) files: every import resolved (where to), missing (who needs what, where it was looked for),
or not enforced (in an executable, which is not loaded by import), and every file that cannot be used.

Its Checks: one failed Check per missing import, one skipped Check per gap in an executable (reported, not
enforced), one failed Check per unusable file, the OpenMP runtimes the libraries load (failed where there is more
than one), then the summary, passed only when nothing is missing or unusable.

One OpenMP runtime per process: two (MSVC's vcomp and LLVM's libomp, Intel's and GNU's, or two copies of one) each
keep a thread pool and their own idea of the thread count; Intel's aborts with "OMP: Error #15" when it sees
another, the others do not, and pytorch/pytorch#193784 (torch_cpu.dll importing both vcomp140.dll and
libomp140.x86_64.dll) gave silent wrong results. Every library and extension a package ships may end up in one
process (torch loads every DLL of torch\\lib at import on Windows; extensions load torch's libraries), so every
OpenMP runtime any of them imports counts; executables run as processes of their own and do not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from torchbuild.results import Check, Status


class Binary(Protocol):
    @property
    def path(self) -> str: ...


F = TypeVar("F", bound=Binary)  # what the format reads of one file (PeInfo, ElfInfo)

# The OpenMP runtimes by the names their libraries are imported by (a vendored copy may carry a hash:
# auditwheel's libgomp-a34b3233.so.1). libiompstubs5md.dll, Intel's serial stub library, is no runtime.
OPENMP_RUNTIMES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("MSVC's vcomp", re.compile(r"vcomp\d*d?(-[0-9a-f]+)?\.dll", re.IGNORECASE)),
    ("Intel's OpenMP", re.compile(r"libiomp5(md)?(-[0-9a-f]+)?\.(dll|so(\.\d+)*)", re.IGNORECASE)),
    ("LLVM's OpenMP", re.compile(r"libomp(140\.x86_64)?(-[0-9a-f]+)?\.(dll|so(\.\d+)*)", re.IGNORECASE)),
    ("GNU's OpenMP", re.compile(r"libgomp(-1)?(-[0-9a-f]{8})?\.(dll|so(\.\d+)*)", re.IGNORECASE)),
)


def openmp_family(name: str) -> str | None:
    """Which OpenMP runtime a library name is (its file name, any case), or None."""
    return next((family for family, pattern in OPENMP_RUNTIMES if pattern.fullmatch(name)), None)


@dataclass(frozen=True)
class OpenMpRuntime:
    name: str  # the library, lower case, as imported
    family: str
    importers: tuple[str, ...]  # the files that import it
    where: tuple[str, ...]  # where it resolves: the file in the package, or why it is allowed


@dataclass(frozen=True)
class Resolved:
    file: str
    needed: str
    via: str  # how it resolves: "wheel", "system", ... (each format names its own)
    target: str  # the file in the wheel, or why it is allowed
    delay: bool = False  # a delay-load import (PE)


@dataclass(frozen=True)
class Missing:
    file: str
    needed: str
    searched: tuple[str, ...]  # wheel directories searched
    elsewhere: tuple[str, ...]  # files of that name elsewhere in the wheel (not on the search path)
    message: str  # what a user reads, in the format's words
    delay: bool = False
    executable: bool = False  # in an executable: reported, not enforced


@dataclass(frozen=True)
class Unusable:
    """A file the closure cannot use: unreadable, or built for another machine."""

    file: str
    reason: str


@dataclass(frozen=True)
class ClosureFormat(Generic[F]):
    """How one binary format reports its closure: the check names and codes, and its summary line."""

    closure: tuple[str, str]  # the summary's (name, code)
    missing: tuple[str, str]
    unenforced: tuple[str, str]
    unusable: tuple[str, str]
    openmp: tuple[str, str]
    summary: Callable[[ClosureReport[F]], str]
    in_process: Callable[[F], bool]  # loaded into the importing process (a library or extension, no executable)


@dataclass(frozen=True)
class ClosureReport(Generic[F]):
    form: ClosureFormat[F]
    scope: str  # what the imports were resolved for: the machine (PE, AMD64) or the manylinux policy (ELF)
    files: tuple[F, ...]
    resolved: tuple[Resolved, ...]
    missing: tuple[Missing, ...]  # of libraries and extensions: the stage fails
    bad: tuple[Unusable, ...]
    unenforced: tuple[Missing, ...] = ()  # of executables: reported only

    @property
    def ok(self) -> bool:
        return not self.missing and not self.bad

    def count(self, via: str) -> int:
        return sum(1 for r in self.resolved if r.via == via)

    @property
    def missing_names(self) -> tuple[str, ...]:
        return tuple(sorted({m.needed.lower() for m in self.missing}))

    @property
    def machine(self) -> str:
        """A PE report's machine."""
        return self.scope

    @property
    def policy(self) -> str:
        """An ELF report's manylinux policy."""
        return self.scope

    def openmp_runtimes(self) -> tuple[OpenMpRuntime, ...]:
        """Every OpenMP runtime the libraries and extensions import, with who imports it: resolved (in the package,
        the system's or a dependency's) or not (torch 2.3's torch_cpu.dll imports vcomp140.dll, which no wheel
        carries: the process loads whichever the machine has, beside the package's own)."""
        in_process = {f.path for f in self.files if self.form.in_process(f)}
        found: dict[str, tuple[str, list[str], set[str]]] = {}
        rows = [(r.file, r.needed, r.target) for r in self.resolved]
        rows += [(m.file, m.needed, "not found") for m in self.missing]
        for file, needed, target in rows:
            family = openmp_family(needed)
            if family is None or file not in in_process:
                continue
            entry = found.setdefault(needed.lower(), (family, [], set()))
            if file not in entry[1]:
                entry[1].append(file)
            entry[2].add(target)
        return tuple(OpenMpRuntime(name, family, tuple(sorted(files)), tuple(sorted(where)))
                     for name, (family, files, where) in sorted(found.items()))  # fmt: skip

    def openmp_problem(self) -> str:
        runtimes = self.openmp_runtimes()
        if len(runtimes) < 2:
            return ""
        return (
            f"{len(runtimes)} OpenMP runtimes in one process: "
            + "; ".join(f"{r.name} ({r.family}) imported by {', '.join(r.importers)}" for r in runtimes)
            + ": each keeps its own thread pool (Intel's aborts with 'OMP: Error #15', the others can give wrong "
            "results silently, pytorch/pytorch#193784)"
        )

    def openmp_line(self) -> str:
        runtimes = self.openmp_runtimes()
        if not runtimes:
            return "no OpenMP runtime imported"
        return "OpenMP: " + "; ".join(f"{r.name} ({r.family}, imported by {', '.join(r.importers)})" for r in runtimes)

    def openmp_check(self) -> Check:
        problem = self.openmp_problem()
        name, code = self.form.openmp
        return Check(name=name, status="failed" if problem else "passed", message=problem or self.openmp_line(),
                     code=code)  # fmt: skip

    def summary(self) -> str:
        text = self.form.summary(self) + f"; {self.openmp_line()}"
        if self.unenforced:
            files = sorted({m.file for m in self.unenforced})
            text += f"; {len(self.unenforced)} unresolved in executables not loaded by import ({', '.join(files)})"
        return text

    def checks(self) -> tuple[Check, ...]:
        form = self.form
        found = [Check(name=form.missing[0], status="failed", message=m.message, code=form.missing[1], file=m.file)
                 for m in self.missing]  # fmt: skip
        found += [
            Check(name=form.unenforced[0], status="skipped", message=m.message, code=form.unenforced[1], file=m.file)
            for m in self.unenforced
        ]
        found += [
            Check(name=form.unusable[0], status="failed", message=b.reason, code=form.unusable[1], file=b.file)
            for b in self.bad
        ]
        found.append(self.openmp_check())
        status: Status = "passed" if self.ok else "failed"
        return (*found, Check(name=form.closure[0], status=status, message=self.summary(), code=form.closure[1]))


def with_hints(report: ClosureReport[F], hint: Callable[[str], str]) -> ClosureReport[F]:
    """``report`` with ``hint(needed)`` appended to the message of each missing import where it says something
    (which declared requirement should have provided the library)."""

    def hinted(gap: Missing) -> Missing:
        extra = hint(gap.needed)
        return dataclasses.replace(gap, message=f"{gap.message}; {extra}") if extra else gap

    return dataclasses.replace(
        report, missing=tuple(map(hinted, report.missing)), unenforced=tuple(map(hinted, report.unenforced))
    )


def left_to_dependencies(report: ClosureReport[F]) -> str:
    """Which imports resolve to packages installed beside the artifact (its declared requirements), by package: one
    line for a stage's message ("libcudart.so.12 from nvidia-cuda-runtime-cu12==12.8.90 (...)")."""
    by_provider: dict[str, set[str]] = {}
    for hit in report.resolved:
        if hit.via == "dependency":
            by_provider.setdefault(hit.target.rpartition("installed by ")[2], set()).add(hit.needed)
    return "; ".join(f"{', '.join(sorted(names))} from {who}" for who, names in sorted(by_provider.items()))


def joint_openmp(runtimes: Mapping[str, Sequence[OpenMpRuntime]]) -> tuple[str, str]:
    """(problem or "", line) for one process that imports several packages (torch and its companions): each package
    (name -> the OpenMP runtimes its libraries and extensions import) may be fine alone and still bring a second
    runtime into the process. Two imports of one name are one runtime: the loader reuses a library already loaded
    under that name (Windows: the module's base name; Linux: its soname), so a vendored copy with a hashed name counts
    again."""
    by_name: dict[str, tuple[str, list[str]]] = {}
    for package, found in runtimes.items():
        for runtime in found:
            entry = by_name.setdefault(runtime.name, (runtime.family, []))
            entry[1].append(f"{package} ({', '.join(runtime.importers)})")
    described = [f"{name} ({family}) imported by {'; '.join(who)}" for name, (family, who) in sorted(by_name.items())]
    together = ", ".join(runtimes)
    if len(by_name) < 2:
        return "", f"import {together}: " + (described[0] if described else "no OpenMP runtime") + " in the process"
    problem = (
        f"import {together} loads {len(by_name)} OpenMP runtimes into one process: {' | '.join(described)}: each keeps "
        "its own thread pool (Intel's aborts with 'OMP: Error #15' beside another copy of itself, the others can give "
        "wrong results silently, pytorch/pytorch#193784)"
    )
    return problem, ""
