"""Every pip call torchbuild makes, in one place, on top of ``proc.run_tool``: downloads for a target platform
(prebuilt torch wheels, DLL provider wheels, CUDA toolkit wheels), installs into fresh environments, and the probes
that ask the configured package indexes (pip.conf, PIP_* variables, find-links, constraints) what they offer.

pip's own configuration is always in force: what pip would not give a user (a release above a constraint, a
platform an index does not serve) torchbuild does not take either.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torchbuild.errors import UserError
from torchbuild.host.proc import ToolFailed, run_tool

TIMEOUT_S = 1800
# pip's log (--log is always verbose) names each file it prepared: "Added torch==2.13.0+cpu from <url> to build tracker"
_PREPARED = re.compile(r"Added (\S+) from (\S+) to build tracker")
# What pip says when the indexes hold no candidate for a requirement; with --no-deps and one pinned requirement, a
# ResolutionImpossible means the same (no candidate within the configured constraints).
_NO_MATCH = ("No matching distribution found", "Could not find a version that satisfies", "ResolutionImpossible")


class PipError(UserError):
    """pip failed; the message carries pip's own ERROR lines. ``no_match``: the indexes have no such distribution
    (as opposed to a failed download or a broken configuration)."""

    def __init__(self, message: str, *, no_match: bool = False, detail: str = "") -> None:
        super().__init__(message)
        self.no_match = no_match
        self.detail = detail or message  # pip's own words


@dataclass(frozen=True)
class Fetched:
    """One file ``download`` put in its destination, and where pip found it."""

    path: Path
    url: str  # file:// for a find-links or local-index hit, else the index's https:// URL
    downloaded: bool  # fetched over the network in this call (not found already in the destination)

    @property
    def local_source(self) -> Path | None:
        """The original file of a file:// hit (pip's copy in the destination is a scratch copy)."""
        parsed = urllib.parse.urlparse(self.url)
        return Path(urllib.request.url2pathname(parsed.path)) if parsed.scheme == "file" else None


def target_args(python: str, abi: str | None, platforms: Sequence[str]) -> list[str]:
    """Options that make pip choose wheels for a target Python and platform instead of this host's (``abi`` None:
    any ABI that Python takes). pip reads ``--python-version 3.6`` as 3.6.0, so a wheel tagged for the ABI that
    says ``Requires-Python >=3.6.2`` (torch 1.8 to 1.10) would never be taken for a Python 3.6 cell: where the ABI
    tag already names the interpreter, Requires-Python is left to it."""
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    if abi is not None:
        args += ["--abi", abi, "--ignore-requires-python"]
    for tag in platforms:
        args += ["--platform", tag]
    return args


def errors(output: str) -> str:
    """pip's ERROR lines, or its last line when it printed none."""
    found = [line.split("ERROR:", 1)[1].strip() for line in output.splitlines() if "ERROR:" in line]
    return " ".join(found) or (output.strip().splitlines() or ["(no output)"])[-1]


def _failed(what: str, exc: ToolFailed, log: Path) -> PipError:
    if exc.returncode is None:
        return PipError(f"{what} took too long (see {log})")
    no_match = any(text in exc.output for text in _NO_MATCH)
    detail = errors(exc.output)
    return PipError(f"{what} failed: {detail} (full log: {log})", no_match=no_match, detail=detail)


def download(
    requirements: Sequence[str],
    dest: Path,
    *,
    log: Path,
    target: Sequence[str] = (),
    live: bool = False,
    timeout: float = TIMEOUT_S,
) -> list[Fetched]:
    """``pip download --no-deps`` of ``requirements`` into ``dest``. A file already in ``dest`` that pip would take
    is used as it is (pip checks it against the index's hash where the index gives one). ``live`` shows pip's
    progress bar. Raises PipError."""
    dest.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="pip-", suffix=".log", dir=dest)
    os.close(fd)
    verbose = Path(name)
    argv = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest), "--log", str(verbose),
        "--progress-bar", "on" if live else "off", *target, *requirements,
    ]  # fmt: skip
    what = f"pip download {' '.join(requirements)}"
    try:
        run_tool(argv, stage="", log=log, timeout=timeout, what=what, live=live)
        failure = None
    except ToolFailed as exc:
        failure = exc
    text = verbose.read_text(encoding="utf-8", errors="replace") if verbose.is_file() else ""
    verbose.unlink(missing_ok=True)
    if live:  # pip wrote to the terminal: its verbose log is the record
        with log.open("a", encoding="utf-8") as handle:
            handle.write(text)
    if failure is not None:
        if live:
            failure.output = text
        raise _failed(what, failure, log) from None
    fetched = []
    for _requirement, url in _PREPARED.findall(text):
        path = dest / urllib.parse.unquote(Path(urllib.parse.urlparse(url).path).name)
        if not path.is_file():
            # pip prepared it and then dropped it: an index without Requires-Python data offers a release the
            # target Python cannot take (filelock 4.0.8 for Python 3.8); pip backtracks to one it can.
            continue
        saved = any(line.rstrip().endswith(path.name) for line in text.splitlines() if " Saved " in line)
        fetched.append(Fetched(path=path, url=url, downloaded=saved and not url.startswith("file:")))
    if not fetched:
        raise PipError(f"{what} succeeded but its log does not say which file it took; see {log}")
    return fetched


def install(python: Path | str, args: Sequence[str], *, log: Path, timeout: float = TIMEOUT_S) -> None:
    """``pip install`` into the environment of ``python``. ``-I``: PYTHONPATH and user site-packages must not make
    pip believe a requirement is already there. Raises PipError."""
    argv = [str(python), *install_argv(args)]
    try:
        run_tool(argv, stage="", log=log, timeout=timeout, what=f"pip install into {python}")
    except ToolFailed as exc:
        raise _failed(f"pip install {' '.join(args)}", exc, log) from None


def install_argv(args: Sequence[str]) -> list[str]:
    """The arguments after the interpreter of a ``pip install`` (the build stage streams its own)."""
    return ["-I", "-m", "pip", "install", "--no-input", "--progress-bar", "off", *args]


def index_versions(name: str, target: Sequence[str], *, timeout: float = 300) -> list[Version]:
    """Every version of ``name`` the configured indexes offer for the target (``pip index versions``)."""
    argv = [sys.executable, "-m", "pip", "index", "versions", name, *target]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PipError(f"`pip index versions {name}` took longer than {timeout:.0f} s") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        if any(text in output for text in _NO_MATCH):
            return []
        raise PipError(f"`pip index versions {name}` failed (exit {proc.returncode}): {errors(output)}")
    found: list[Version] = []
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            for text in line.split(":", 1)[1].split(","):
                try:
                    found.append(Version(text.strip()))
                except InvalidVersion:
                    continue
    return found


def settings() -> dict[str, list[str]]:
    """pip's configuration as pip applies it: ``pip config list`` (the files' settings, later files overriding
    earlier ones) and the PIP_* variables, which override both; setting name -> values."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, errors="replace", check=False
    )
    found: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        for item in value.strip().strip("'\"").split():
            if item not in found.setdefault(name, []):
                found[name].append(item)
    for name in ("index-url", "extra-index-url", "find-links", "constraint", "cert", "default-timeout"):
        env = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if env:
            found[name] = [*dict.fromkeys([*env.split(), *found.get(name, [])])]
    return found


def config_files() -> list[str]:
    """Every configuration file pip looks for, whether it exists or not (``pip config debug``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "debug"], capture_output=True, text=True, errors="replace", check=False
    )
    return [
        line.strip().rsplit(", exists: ", 1)[0]
        for line in proc.stdout.splitlines()
        if line.startswith("  ") and not line.startswith("    ") and ", exists: " in line
    ]


def constraint_files(configured: dict[str, list[str]] | None = None) -> list[Path]:
    """The constraints files pip applies to every install and download: PIP_CONSTRAINT and the ``constraint``
    setting of its configuration files."""
    return [Path(p) for p in (configured if configured is not None else settings()).get("constraint", [])]


def constraints_for(name: str, configured: dict[str, list[str]] | None = None) -> list[Requirement]:
    """The configured constraints on ``name`` (e.g. this machine's ``torch<=2.14.1``)."""
    found: list[Requirement] = []
    for path in constraint_files(configured):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue  # pip itself reports an unreadable constraints file when it runs
        for line in lines:
            text = line.split(" #", 1)[0].strip()
            if not text or text.startswith(("#", "-")):
                continue
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) == canonicalize_name(name):
                found.append(requirement)
    return found
