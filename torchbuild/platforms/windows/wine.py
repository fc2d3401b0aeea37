"""Everything Wine: finding it, a prefix for the win-64 checks, its environment, the wineserver's lifetime, running
a Windows program with pipes and a time limit, and reading what Wine's loader says.

What this module settles (each found the hard way, on the corpus of bench/corpus.py under Wine 8.0):

- A prefix is made once per Wine version in the cache (``wineboot --init``, Windows version set to win10, Mono and
  Gecko left out) and copied with ``cp -a`` for each use (about 1 s); nothing a check runs writes into it, but a
  copy keeps every run independent of the others and of the template.
- The Microsoft VC runtime is native-only (``=n``): Wine has builtin msvcp140/vcruntime140/... that would make a
  wheel without the VC runtime pass; with ``=n`` a missing one fails as it does on a clean Windows machine.
- Std handles must be pipes or /dev/null: a regular file as stdin/stdout/stderr of python.exe kills it at start-up
  (``init_sys_streams ... [WinError 6]``). And Wine's service processes (services.exe, explorer.exe, ...) inherit
  the pipes of the first program that starts them and hold them open until the wineserver exits, so a reader waits
  for EOF for ever: ``Session`` starts a persistent wineserver and the services (``wineboot``) with stdio on
  /dev/null first, and kills everything in the prefix at the end (``wineserver -k``).
- ``winedbg.exe=d``: a crash prints two lines, not a 200-line register and module dump.
- Loader lines need ``WINEDEBUG=warn+module``: a missing export is only a warning under Wine (``No implementation
  for X.dll.F``; the load succeeds, the call aborts later), where Windows fails the load with error 127.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from torchbuild.errors import UserError
from torchbuild.platforms.windows import wine_cpus

INSTALL_HINT = "apt-get install wine64"
PREFIX_TIMEOUT_S = 300.0
SERVER_TIMEOUT_S = 120.0
# DLLs of the Microsoft VC runtime that Wine also has as builtins: the native file or nothing.
VC_NATIVE = (
    "msvcp140", "msvcp140_1", "msvcp140_2", "msvcp140_atomic_wait", "msvcp140_codecvt_ids", "vcruntime140",
    "vcruntime140_1", "concrt140", "vcomp140",
)  # fmt: skip
DLL_OVERRIDES = ",".join(VC_NATIVE) + "=n;mscoree,mshtml=;winedbg.exe=d"
DEBUG = "-all,err+module,warn+module"
# Host variables a Windows program must not see (Wine passes the Unix environment through).
SCRUBBED = ("DISPLAY", "WAYLAND_DISPLAY", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")

# Wine's loader lines (stderr; "{tid}:{class}:module:{function} ..."; paths inside L"..." with doubled backslashes).
_MISSING_DLL = re.compile(r'^[0-9a-f]+:err:module:import_dll Library (\S+) \(which is needed by L"(.+)"\) not found$')
_MISSING_EXPORT = re.compile(
    r'^[0-9a-f]+:warn:module:import_dll No implementation for (\S+?\.(?:dll|exe|pyd|drv|sys))\.(\S+) '
    r'imported from L"(.+)", setting to [0-9A-Fa-fx]+$',
    re.IGNORECASE,
)
_INIT_FAILED = re.compile(r'^[0-9a-f]+:warn:module:process_attach Initialization of L"(.+)" failed$')
_UNIMPLEMENTED = re.compile(r"^wine: Call from \S+ to unimplemented function (\S+), aborting$")
# Lines that say nothing about the program: native DLLs have no builtin twin, the 32-bit half is not installed, no
# display. Left out of what a user is shown.
_NOISE = re.compile(
    r"find_builtin_dll cannot find builtin|wine32 is missing|multiarch needs|dpkg --add-architecture|"
    r"apt-get install wine32|winemac\.drv|winex11\.drv|nodrv_CreateWindow|syswow64\\\\rundll32"
)
# CPython 3.12 and 3.13 import KERNEL32 functions Wine 8.0 lacks (process snapshots, CopyFile2); every start of
# their python.exe logs them. Only these, and only from the interpreter's own DLL, are not the wheel's problem.
KNOWN_MISSING_EXPORTS = frozenset(
    {"kernel32.dll.psscapturesnapshot", "kernel32.dll.pssfreesnapshot", "kernel32.dll.pssquerysnapshot",
     "kernel32.dll.copyfile2"}
)  # fmt: skip
_INTERPRETER_DLL = re.compile(r"python3\d*\.dll", re.IGNORECASE)


class WineError(UserError):
    """Wine could not be set up or did not run the program (not: the program failed)."""


@dataclass(frozen=True)
class Wine:
    executable: str  # wine (Debian's wine64 under that name) or wine64
    server: str  # wineserver
    version: str  # 8.0

    @property
    def label(self) -> str:
        return f"Wine {self.version}"


def find() -> Wine | None:
    """The Wine on PATH that runs 64-bit programs, or None."""
    executable = shutil.which("wine") or shutil.which("wine64")
    server = shutil.which("wineserver")
    if executable is None or server is None:
        return None
    try:
        probe = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, errors="replace", timeout=60, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"wine-(\S+)", probe.stdout.strip())
    if probe.returncode != 0 or match is None:
        return None
    return Wine(executable=executable, server=server, version=match.group(1))


def windows_path(path: Path) -> str:
    """The path a Windows program under Wine sees for a host path (drive Z: is the host's /)."""
    return "Z:" + str(path.absolute()).replace("/", "\\")


def host_path(windows: str) -> Path:
    """The host path of a Z: path Wine printed (its doubled backslashes undone)."""
    text = windows.replace("\\\\", "\\")
    if text[:2].upper() == "Z:":
        text = text[2:]
    return Path(text.replace("\\", "/"))


def environment(prefix: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("WINE")}
    env.update(WINEPREFIX=str(prefix), WINEARCH="win64", WINEDEBUG=DEBUG, WINEDLLOVERRIDES=DLL_OVERRIDES)
    env.update(extra or {})
    return env


# --- prefixes ----------------------------------------------------------------------------------------------


def _quiet(argv: Sequence[str], env: Mapping[str, str], timeout: float, what: str) -> None:
    try:
        proc = subprocess.run(
            list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise WineError(f"{what} took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in proc.stdout.decode(errors="replace").splitlines() if not _NOISE.search(ln)]
        raise WineError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(lines[-20:]))


def user_env(user: str) -> dict[str, str]:
    """What makes Wine's Windows user ``user``: its profile, ``C:\\users\\<user>``, and the variables under it."""
    return {"USER": user, "LOGNAME": user}


def _registry_setting(key: str, name: str, kind: str, value: str) -> list[str]:
    return ["reg", "add", key, "/v", name, "/t", kind, "/d", value, "/f"]


def template(wine: Wine, cache_dir: Path, user: str | None = None) -> Path:
    """The prefix every run copies, made once per Wine version in the cache. ``user``: a Windows user of that name
    (a prefix of its own), whose TEMP and TMP are where Windows puts them (``%USERPROFILE%\\AppData\\Local\\Temp``;
    Wine's own is ``%USERPROFILE%\\Temp``) and whose Documents, Downloads ... are folders of the profile (Wine links
    them to this side's home folder)."""
    name = f"prefix-{re.sub(r'[^A-Za-z0-9.]+', '_', wine.version)}"
    if user is not None:
        name += f"-user-{hashlib.sha256(user.encode()).hexdigest()[:12]}"
    path = cache_dir / "wine" / name
    if (path / ".complete").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".prefix-", dir=path.parent))
    env = {**environment(staging, user_env(user) if user else None), "WINEDEBUG": "-all"}
    settings = [_registry_setting("HKCU\\Software\\Wine", "Version", "REG_SZ", "win10")]
    if user is not None:
        temp = "%USERPROFILE%\\AppData\\Local\\Temp"
        settings += [_registry_setting("HKCU\\Environment", var, "REG_EXPAND_SZ", temp) for var in ("TEMP", "TMP")]
    try:
        _quiet([wine.executable, "wineboot", "--init"], env, PREFIX_TIMEOUT_S, f"wineboot --init of {staging}")
        for setting in settings:
            _quiet([wine.executable, *setting], env, PREFIX_TIMEOUT_S, f"setting {setting[2]}\\{setting[4]}")
        if user is not None:
            profile = staging / "drive_c" / "users" / user
            for linked in [p for p in profile.iterdir() if p.is_symlink()]:  # Documents, Downloads ... -> this $HOME
                linked.unlink()
                linked.mkdir()
            (profile / "AppData" / "Local" / "Temp").mkdir(parents=True, exist_ok=True)
    finally:
        subprocess.run([wine.server, "-k"], env=env, check=False, capture_output=True, timeout=SERVER_TIMEOUT_S)
        subprocess.run([wine.server, "-w"], env=env, check=False, capture_output=True, timeout=SERVER_TIMEOUT_S)
    (staging / ".complete").write_text(f"{wine.label}\n", encoding="utf-8")
    if (path / ".complete").is_file():  # made by another run meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
        staging.replace(path)
    return path


def fresh_prefix(wine: Wine, cache_dir: Path, dest: Path, user: str | None = None) -> Path:
    """A copy of the template prefix (of ``user``'s) at ``dest`` (replacing what is there)."""
    source = template(wine, cache_dir, user)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["cp", "-a", str(source), str(dest)], capture_output=True, text=True, errors="replace",
                          check=False)  # fmt: skip
    if proc.returncode != 0:
        raise WineError(f"copying the Wine prefix {source} to {dest} failed: {proc.stderr.strip()}")
    return dest


# --- running -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    argv: tuple[str, ...]
    returncode: int | None  # None: timed out (everything in the prefix was killed)
    stdout: str
    stderr: str
    seconds: float

    @property
    def shown_stderr(self) -> str:
        """stderr without Wine's noise."""
        return "\n".join(ln for ln in self.stderr.splitlines() if not _NOISE.search(ln))


class Session:
    """A running wineserver for one prefix; ``run`` starts Windows programs in it. Use as a context manager: the
    server and every process in the prefix are gone afterwards."""

    def __init__(self, wine: Wine, prefix: Path, env: Mapping[str, str] | None = None) -> None:
        self.wine = wine
        self.prefix = prefix
        self.env = environment(prefix, env)
        self._warm = False
        self.cpu: int | None = None  # where the server and its processes run (wine_cpus.py), while started

    def start(self) -> None:
        if self.cpu is None:
            self.cpu = wine_cpus.HOST.take()
        # -p: persistent; the services started by wineboot get /dev/null, not the pipes of a later run.
        # The server goes to the background: with pipes, this call would wait for it to exit.
        subprocess.run(wine_cpus.pinned([self.wine.server, "-p"], self.cpu), env=self.env, check=False,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=SERVER_TIMEOUT_S)  # fmt: skip
        # Its services live as long as the server: they must hold /dev/null, not a pipe someone reads to EOF.
        try:
            proc = subprocess.run(
                wine_cpus.pinned([self.wine.executable, "wineboot"], self.cpu), env=self.env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=PREFIX_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            self.stop()
            raise WineError(f"starting Wine in {self.prefix} took longer than {PREFIX_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            self.stop()
            raise WineError(f"starting Wine in {self.prefix} failed (`wine wineboot` exited {proc.returncode})")
        self._warm = True

    def stop(self) -> None:
        for flag in ("-k", "-w"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run([self.wine.server, flag], env=self.env, check=False, capture_output=True,
                               timeout=SERVER_TIMEOUT_S)  # fmt: skip
        self._warm = False
        wine_cpus.HOST.give(self.cpu)
        self.cpu = None

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def run(
        self,
        argv: Sequence[str | Path],
        *,
        timeout: float,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        merge_stderr: bool = False,
        encoding: str = "utf-8",
    ) -> Ran:
        """Run a Windows program (its path a host path) with stdin on /dev/null and stdout/stderr on pipes.
        ``merge_stderr``: Wine's lines and the program's output in one stream, in the order they were written.
        ``encoding``: what the program writes its output in (a Windows program's pipe: the ANSI code page, unless it
        is told otherwise). On a time-out every process in the prefix is killed and the server started again."""
        if not self._warm:
            self.start()
        args = tuple(str(a) for a in argv)
        started = time.monotonic()
        argv_run = wine_cpus.pinned([self.wine.executable, *args], self.cpu)
        proc = subprocess.Popen(
            argv_run, cwd=cwd, env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            self.stop()
            out, err = proc.communicate()
            code = None
        return Ran(args, code, (out or b"").decode(encoding, errors="replace"),
                   (err or b"").decode(encoding, errors="replace"), time.monotonic() - started)  # fmt: skip


# --- what the loader said ----------------------------------------------------------------------------------

ProblemKind = Literal["missing dll", "missing export", "init failed", "unimplemented call"]


@dataclass(frozen=True)
class LoaderProblem:
    kind: ProblemKind
    name: str  # the DLL, or DLL.Function
    importer: str  # the host path of the module that needed it ("" for an unimplemented call)

    @property
    def known(self) -> bool:
        """A line every start of CPython 3.12/3.13 under Wine 8.0 logs (see KNOWN_MISSING_EXPORTS)."""
        return (
            self.kind == "missing export"
            and self.name.lower() in KNOWN_MISSING_EXPORTS
            and _INTERPRETER_DLL.fullmatch(Path(self.importer).name) is not None
        )

    def describe(self, relative_to: Path | None = None) -> str:
        importer = self.importer
        if relative_to is not None and importer:
            with contextlib.suppress(ValueError):
                importer = Path(importer).relative_to(relative_to).as_posix()
        if self.kind == "missing dll":
            return f"{self.name} (needed by {importer}) not found"
        if self.kind == "missing export":
            return f"{self.name} (imported by {importer}) not exported"
        if self.kind == "init failed":
            return f"{importer}: DllMain failed"
        return f"{self.name} called but Wine does not implement it"


def loader_problems(text: str) -> list[LoaderProblem]:
    """Every loader problem Wine reported in ``text`` (stderr, or a merged stream), in order, each once."""
    found: list[LoaderProblem] = []
    for line in text.splitlines():
        line = line.rstrip("\r")
        problem: LoaderProblem | None = None
        if m := _MISSING_DLL.match(line):
            problem = LoaderProblem("missing dll", m.group(1), str(host_path(m.group(2))))
        elif m := _MISSING_EXPORT.match(line):
            problem = LoaderProblem("missing export", f"{m.group(1)}.{m.group(2)}", str(host_path(m.group(3))))
        elif m := _INIT_FAILED.match(line):
            problem = LoaderProblem("init failed", host_path(m.group(1)).name, str(host_path(m.group(1))))
        elif m := _UNIMPLEMENTED.match(line):
            problem = LoaderProblem("unimplemented call", m.group(1), "")
        if problem is not None and problem not in found:
            found.append(problem)
    return found


def without_noise(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not _NOISE.search(ln))
