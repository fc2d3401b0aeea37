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
OpenMP runtime any of them imports counts; executables run as processes of their own and do not. So does every
runtime the libraries of the package's declared requirements bring in, transitively, from those its files import
(``with_requirement_libraries``: torch 2.3.x's torch_cpu.dll imports vcomp140.dll and mkl_intel_thread.1.dll of its
``mkl`` requirement, which loads Intel's libiomp5md.dll by name); each is named with the chain that brings it. The
caller reads those libraries (their imports, what the data says they load by name) and passes them in: this module
never sees where they come from. The one exception to "two runtimes fail" is a set recorded for upstream's own wheel
(``UpstreamOpenMp``), passed exactly and said in full where the caller finds the package is that wheel.
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
    importers: tuple[str, ...]  # the package's files that import it
    where: tuple[str, ...]  # where it resolves: the file in the package, or why it is allowed
    # how a declared requirement's library brings it in, each a phrase: "loaded by name by mkl_intel_thread.1.dll of
    # mkl==2021.4.0 (cuda_wheels.yaml), which torch/lib/torch_cpu.dll imports"
    chains: tuple[str, ...] = ()

    def how(self) -> str:
        """"imported by a, b; loaded by name by ..., which a imports"."""
        return "; ".join([f"imported by {', '.join(self.importers)}"] * bool(self.importers) + list(self.chains))

    def describe(self) -> str:
        return f"{self.name} ({self.family}) {self.how()}"


@dataclass(frozen=True)
class RequirementLibrary:
    """A library a declared requirement installs beside the package (read from its file by the caller), and what
    it brings into the process in turn: an in-process binary that imports it loads these too."""

    name: str  # its file name (mkl_intel_thread.1.dll, libcublas.so.12)
    provider: str  # the requirement that installs it: mkl==2021.4.0
    imports: tuple[str, ...]  # its import tables (DT_NEEDED)
    loads: tuple[str, ...] = ()  # what it loads by name at run time (no import table names them: recorded data)
    loads_recorded_in: str = ""  # where ``loads`` is recorded


@dataclass(frozen=True)
class UpstreamOpenMp:
    """The OpenMP runtimes upstream's own wheel of a release is recorded to load together: where the package is that
    wheel, passed through unchanged, exactly this set passes (repackaging cannot change it), saying so."""

    runtimes: frozenset[str]  # lower-case library names
    who: str  # "upstream's torch 2.3.1 (torch-2.3.1-cp312-cp312-win_amd64.whl)"
    recorded_in: str  # the data file


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
    requirement_libraries: tuple[RequirementLibrary, ...] = ()  # installed beside it (with_requirement_libraries)
    upstream_openmp: UpstreamOpenMp | None = None  # accepted where it is upstream's wheel unchanged
    upstream_refused: str = ""  # why a recorded upstream set does not apply to this package (said with a problem)

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
        carries: the process loads whichever the machine has, beside the package's own); and every one the declared
        requirements' libraries they import bring in turn (``requirement_libraries``, followed transitively)."""
        in_process = {f.path for f in self.files if self.form.in_process(f)}
        found: dict[str, tuple[str, set[str], set[str], list[str]]] = {}
        rows = [(r.file, r.needed, r.target) for r in self.resolved]
        rows += [(m.file, m.needed, "not found") for m in self.missing]
        rows = [row for row in rows if row[0] in in_process]
        for file, needed, target in rows:
            if (family := openmp_family(needed)) is not None:
                entry = found.setdefault(needed.lower(), (family, set(), set(), []))
                entry[1].add(file)
                entry[2].add(target)
        for needed, target, chain in self._through_requirements(rows):
            if (family := openmp_family(needed)) is not None:
                entry = found.setdefault(needed.lower(), (family, set(), set(), []))
                entry[2].add(target)
                entry[3].append(chain)
        return tuple(OpenMpRuntime(name, family, tuple(sorted(files)), tuple(sorted(where)),
                                   tuple(dict.fromkeys(chains)))
                     for name, (family, files, where, chains) in sorted(found.items()))  # fmt: skip

    def _through_requirements(self, rows: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """(what, where, how) for each library the declared requirements' libraries import or load by
        name, breadth first from the ones the package's in-process files import; each library is followed once,
        by the shortest chain."""
        libraries = {lib.name.lower(): lib for lib in self.requirement_libraries}
        importers: dict[str, list[str]] = {}
        for file, needed, _ in rows:
            if needed.lower() in libraries:
                importers.setdefault(needed.lower(), []).append(file)
        todo = [(libraries[name], _which_import(files)) for name, files in importers.items()]
        seen = set(importers)
        reached = []
        while todo:
            lib, tail = todo.pop(0)
            where = f" ({lib.loads_recorded_in})" if lib.loads_recorded_in else ""
            edges = [(n, f"imported by {lib.name} of {lib.provider}", "imports") for n in lib.imports]
            edges += [(n, f"loaded by name by {lib.name} of {lib.provider}{where}", "loads by name") for n in lib.loads]
            for needed, how, verb in edges:
                low = needed.lower()
                target = f"installed by {libraries[low].provider}" if low in libraries else "not a declared library"
                reached.append((needed, target, f"{how}, {tail}"))
                if low in libraries and low not in seen:
                    seen.add(low)
                    todo.append((libraries[low], f"which {lib.name} of {lib.provider} {verb}, {tail}"))
        return reached

    def openmp_accepted(self) -> bool:
        """Whether the runtimes are exactly the set upstream's own wheel is recorded to load (``upstream_openmp``)."""
        known = self.upstream_openmp
        return known is not None and {r.name for r in self.openmp_runtimes()} == known.runtimes

    def openmp_problem(self) -> str:
        runtimes = self.openmp_runtimes()
        if len(runtimes) < 2 or self.openmp_accepted():
            return ""
        problem = (
            f"{len(runtimes)} OpenMP runtimes in one process: "
            + "; ".join(r.describe() for r in runtimes)
            + f": {_why_one_runtime()}"
        )
        known = self.upstream_openmp
        if known is not None:
            problem += (
                f"; {known.recorded_in} records {', '.join(sorted(known.runtimes))} for {known.who}, "
                "not this set: only exactly that set passes, as upstream ships it"
            )
        return problem + (f"; {self.upstream_refused}" if self.upstream_refused else "")

    def openmp_line(self) -> str:
        runtimes = self.openmp_runtimes()
        if not runtimes:
            return "no OpenMP runtime imported"
        if len(runtimes) > 1 and self.openmp_accepted() and self.upstream_openmp is not None:
            known = self.upstream_openmp
            return (
                f"{known.who} loads {len(runtimes)} OpenMP runtimes in one process: "
                + "; ".join(r.describe() for r in runtimes)
                + f": passed through as upstream ships it ({known.recorded_in}; repackaging cannot change which "
                "runtimes its binaries load)"
            )
        return "OpenMP: " + "; ".join(f"{r.name} ({r.family}, {r.how()})" for r in runtimes)

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


def _which_import(files: Sequence[str], tail: str = "") -> str:
    """"which torch/lib/torch_cpu.dll imports" (more files: "which a, b import"), then how those got in."""
    names = sorted(set(files))
    text = f"which {', '.join(names)} import{'s' if len(names) == 1 else ''}"
    return f"{text}, {tail}" if tail else text


def with_requirement_libraries(
    report: ClosureReport[F],
    libraries: Sequence[RequirementLibrary],
    upstream: UpstreamOpenMp | None = None,
    refused: str = "",
) -> ClosureReport[F]:
    """``report`` whose OpenMP count follows what the declared requirements' ``libraries`` import and load in turn,
    and accepts exactly ``upstream``'s recorded set (None: no acceptance: a compiled wheel, or one not upstream's;
    ``refused``: why not, said where the count fails)."""
    return dataclasses.replace(
        report, requirement_libraries=tuple(libraries), upstream_openmp=upstream, upstream_refused=refused
    )


def left_to_dependencies(report: ClosureReport[F]) -> str:
    """Which imports resolve to packages installed beside the artifact (its declared requirements), by package: one
    line for a stage's message ("libcudart.so.12 from nvidia-cuda-runtime-cu12==12.8.90 (...)")."""
    by_provider: dict[str, set[str]] = {}
    for hit in report.resolved:
        if hit.via == "dependency":
            by_provider.setdefault(hit.target.rpartition("installed by ")[2], set()).add(hit.needed)
    return "; ".join(f"{', '.join(sorted(names))} from {who}" for who, names in sorted(by_provider.items()))


def joint_openmp(
    runtimes: Mapping[str, Sequence[OpenMpRuntime]], upstream: UpstreamOpenMp | None = None
) -> tuple[str, str]:
    """(problem or "", line) for one process that imports several packages (torch and its companions): each package
    (name -> the OpenMP runtimes its libraries and extensions import) may be fine alone and still bring a second
    runtime into the process. Two imports of one name are one runtime: the loader reuses a library already loaded
    under that name (Windows: the module's base name; Linux: its soname), so a vendored copy with a hashed name counts
    again. ``upstream``: torch's recorded set where its wheel is upstream's own, passed where the process has exactly
    that set."""
    by_name: dict[str, tuple[str, list[str]]] = {}
    for package, found in runtimes.items():
        for runtime in found:
            entry = by_name.setdefault(runtime.name, (runtime.family, []))
            how = "; ".join([", ".join(runtime.importers)] * bool(runtime.importers) + list(runtime.chains))
            entry[1].append(f"{package} ({how})")
    described = [f"{name} ({family}) imported by {'; '.join(who)}" for name, (family, who) in sorted(by_name.items())]
    together = ", ".join(runtimes)
    if len(by_name) < 2:
        return "", f"import {together}: " + (described[0] if described else "no OpenMP runtime") + " in the process"
    if upstream is not None and set(by_name) == upstream.runtimes:
        return "", (
            f"import {together}: {upstream.who} loads {len(by_name)} OpenMP runtimes in one process, the companions "
            f"add none: {' | '.join(described)}: passed through as upstream ships it ({upstream.recorded_in})"
        )
    problem = (
        f"import {together} loads {len(by_name)} OpenMP runtimes into one process: {' | '.join(described)}: "
        + _why_one_runtime(" beside another copy of itself")
    )
    return problem, ""


def _why_one_runtime(intel: str = "") -> str:
    """Why a process may load one OpenMP runtime only; ``intel``: what the abort needs, where said."""
    return (
        f"each keeps its own thread pool (Intel's aborts with 'OMP: Error #15'{intel}, the others can give wrong "
        "results silently, pytorch/pytorch#193784)"
    )
