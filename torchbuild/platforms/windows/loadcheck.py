"""The loader check: every .dll and .pyd of a Windows tree loaded with LoadLibraryExW, as Python >= 3.8 and torch
load them, by a small program that needs no Python (``native/loadcheck.c`` beside this module), under Wine on Linux.

The program is compiled with mingw-w64 on demand into ``<cache>/loadcheck/<sha256 of the source>/loadcheck.exe``,
so a changed source is compiled again and an unchanged one never. Where mingw-w64 or Wine is missing, the check is
"skipped" with what to install.

Each file gets OK or the Windows error of its load (126 a module it imports is missing, 127 an export is missing,
193 not a valid AMD64 image, 1114 its initialization failed) with what was missing, read from Wine's loader lines:
the DLL it imports (and which file imports it) or the DLL.Function. Wine differs from Windows in two ways that are
translated here: a missing export does not fail the load (Wine logs "No implementation" and goes on), so the file
is reported as Windows reports it, 127; and a DllMain that fails or faults gives 998 where Windows gives 1114.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.host import signals
from torchbuild.platforms.windows import wine

SOURCE = "loadcheck.c"
COMPILER = "x86_64-w64-mingw32-gcc"
TIMEOUT_S = 600.0
# Windows' words for the errors a load can end with (Wine's FormatMessage texts differ: match on numbers).
ERRORS = {
    126: "The specified module could not be found",
    127: "The specified procedure could not be found",
    193: "is not a valid Win32 application",
    998: "Invalid access to memory location (Wine's code for a failed DLL initialization; Windows: 1114)",
    1114: "A dynamic link library (DLL) initialization routine failed",
}
_RESULT = re.compile(r"^(OK|FAIL) (.+?)(?: (\d+) (.*))?$")


class Unavailable(UserError):
    """The check cannot run here; the message is the reason ("needs mingw-w64 ...")."""


def source_text() -> bytes:
    return resources.files("torchbuild.platforms.windows").joinpath("native").joinpath(SOURCE).read_bytes()


def build(cache_dir: Path, log: Path) -> Path:
    """loadcheck.exe for the current source, compiled once into the cache. Raises Unavailable without mingw-w64."""
    source = source_text()
    digest = hashlib.sha256(source).hexdigest()
    exe = cache_dir / "loadcheck" / digest / "loadcheck.exe"
    if exe.is_file():
        return exe
    compiler = shutil.which(COMPILER)
    if compiler is None:
        raise Unavailable(f"needs mingw-w64 to compile the loader check ({COMPILER} not on PATH; apt-get install "
                          "mingw-w64)")  # fmt: skip
    exe.parent.mkdir(parents=True, exist_ok=True)
    src = exe.parent / SOURCE
    src.write_bytes(source)
    partial = exe.with_suffix(".exe.part")
    argv = [compiler, "-municode", "-O2", "-s", "-Wall", "-o", str(partial), str(src)]
    proc = signals.run(argv, capture_output=True, text=True, errors="replace", check=False)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        raise UserError(f"compiling {SOURCE} with {COMPILER} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    partial.replace(exe)
    return exe


@dataclass(frozen=True)
class Loaded:
    """One file's load."""

    file: str  # relative to the tree, '/'-separated
    code: int | None  # None: it loaded
    missing: tuple[str, ...] = ()  # what was missing: "msvcp140.dll (needed by torch/lib/c10.dll)", "a.dll.bar"
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.code is None

    def describe(self) -> str:
        if self.ok:
            return f"{self.file}: OK"
        if self.code == -1:  # no result line for this file
            return f"{self.file}: {self.note}"
        text = f"{self.file}: error {self.code} ({ERRORS.get(self.code or 0, 'see the log')})"
        if self.missing:
            text += ": missing " + ", ".join(self.missing)
        return text + (f"; {self.note}" if self.note else "")


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _result(file: str, code: int | None, problems: Sequence[wine.LoaderProblem], root: Path, names: set[str]) -> Loaded:
    missing_dlls = [p for p in problems if p.kind == "missing dll"]
    # The first cause, not the chain: "msvcp140.dll (needed by c10.dll)" rather than also "c10.dll (needed by ...)".
    causes = [p for p in missing_dlls if p.name.lower() not in names] or missing_dlls
    exports = [p for p in problems if p.kind == "missing export" and not p.known]
    grouped: dict[str, list[str]] = {}
    for p in causes:
        grouped.setdefault(p.name.lower(), []).append(_relative(Path(p.importer), root))
    missing = [f"{name} (needed by {', '.join(dict.fromkeys(by))})" for name, by in grouped.items()]
    missing += [f"{p.name} (imported by {_relative(Path(p.importer), root)})" for p in exports]
    failed_init = [_relative(Path(p.importer), root) for p in problems if p.kind == "init failed"]
    note = f"initialization failed: {', '.join(failed_init)}" if failed_init else ""
    if code is None and exports:
        # Wine resolved the import to nothing and loaded the file; Windows refuses it.
        return Loaded(file, 127, tuple(missing), "Wine loads it with the import unresolved; Windows fails the load")
    return Loaded(file, code, tuple(missing) if code is not None else (), note)


def parse(output: str, files: Sequence[str], root: Path) -> list[Loaded]:
    """loadcheck.exe's lines and Wine's loader lines, merged in the order they were written, into one result per
    file (a file without a result line: the program stopped before it)."""
    names = {Path(f).name.lower() for f in files}
    by_path = {str((root / f).absolute()): f for f in files}
    results: dict[str, Loaded] = {}
    pending: list[str] = []
    for line in output.splitlines():
        line = line.rstrip("\r")
        match = _RESULT.match(line)
        if match is None:
            pending.append(line)
            continue
        path = str(wine.host_path(match.group(2)))
        file = by_path.get(path, _relative(Path(path), root))
        code = int(match.group(3)) if match.group(1) == "FAIL" and match.group(3) else None
        problems = wine.loader_problems("\n".join(pending))
        results[file] = _result(file, code, problems, root, names)
        pending = []
    stopped = wine.loader_problems("\n".join(pending))
    why = "; ".join(p.describe(root) for p in stopped) or "the loader check stopped before it"
    return [results.get(f) or Loaded(f, -1, (), f"no result ({why})") for f in files]


@dataclass(frozen=True)
class Run:
    results: tuple[Loaded, ...]
    seconds: float
    output: str  # everything, for the log
    attempts: int = 1

    @property
    def failed(self) -> tuple[Loaded, ...]:
        return tuple(r for r in self.results if not r.ok)

    def write_log(self, log: Path, what: str) -> None:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ loadcheck.exe ({what}; {self.attempts} start(s), {self.seconds:.1f} s)\n{self.output}\n")


def check(
    session: wine.Session,
    exe: Path,
    root: Path,
    files: Sequence[str],
    *,
    python_dir: str | None,
    dll_dirs: Sequence[str],
    timeout: float = TIMEOUT_S,
) -> Run:
    """Load ``files`` (relative to ``root``; .dll first, then .pyd, each group sorted) in one process, with
    ``python_dir`` (where python3X.dll and Python's vcruntime140.dll are: the application directory of python.exe)
    and the ``dll_dirs`` that exist added as DLL directories first."""
    ordered = sorted(files, key=lambda f: (not f.lower().endswith(".dll"), f))
    argv: list[str | Path] = [exe]
    for directory in ([python_dir] if python_dir else []) + list(dll_dirs):
        if (root / directory).is_dir():
            argv += ["-d", wine.windows_path(root / directory)]
    argv += [wine.windows_path(root / f) for f in ordered]
    ran = session.run(argv, timeout=timeout, merge_stderr=True)
    output, attempts = ran.stdout, 1
    if ran.returncode is not None and not any(_RESULT.match(line.rstrip("\r")) for line in ran.stdout.splitlines()):
        # Seen once in CI under load: the helper's process ended without printing a line (not even Wine's), and the
        # next start in the same session worked. A program that printed nothing has judged nothing: start it again,
        # once, and keep both outputs for the log.
        first = f"[first start: exit {ran.returncode}, no result line]\n{ran.stdout}"
        ran = session.run(argv, timeout=timeout, merge_stderr=True)
        output, attempts = f"{first}\n[second start: exit {ran.returncode}]\n{ran.stdout}", 2
    results = parse(ran.stdout, ordered, root)
    if ran.returncode is None:
        results = [r if r.ok or r.code != -1 else Loaded(r.file, -1, (), f"timed out after {timeout:.0f} s")
                   for r in results]  # fmt: skip
    return Run(tuple(results), ran.seconds, output, attempts)
