"""uv, the one wrapper of it: the resolver that chooses wheels for a target platform and Python (``lock``: ``uv pip
compile --python-platform ... --python-version ...`` to a pylock.toml, PEP 751, read as TOML), and the installer the
smoke environments are made with (``uv venv``, ``uv pip install``: they link a wheel's files from uv's cache).

uv reads no pip configuration, so pip's (pip_config.py: pip.conf, PIP_* variables: index URLs, find-links,
constraints, certificate, timeout) is handed to uv as flags and variables, and uv's own configuration files are
not read: a resolution gets what a user's pip would install, and nothing pip would refuse. With several indexes,
uv takes the best match over all of them, as pip does (``--index-strategy unsafe-best-match``). A find-links
folder that is not there is left out (pip warns and goes on; uv would stop).
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.tags import Tag
from packaging.utils import BuildTag, InvalidWheelFilename, parse_wheel_filename

from torchbuild.errors import UserError
from torchbuild.host import pip_config, signals
from torchbuild.host.proc import ToolFailed, run_tool

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

TIMEOUT_S = 1800
ANY_PATCH = 99  # Target.args
NO_SOLUTION = 1  # uv's exit status when the requirements cannot be met (2: it could not run, e.g. no network)
_ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}  # the architecture in a wheel tag -> in uv's platform


class UvError(UserError):
    """uv failed; the message says what it was doing and its last lines. ``no_match``: the configured indexes have
    nothing that meets the requirements (as opposed to uv not running, an index not answering)."""

    def __init__(self, message: str, *, no_match: bool = False, detail: str = "") -> None:
        super().__init__(message)
        self.no_match = no_match
        self.detail = detail or message


_FINDING = threading.Lock()


@functools.cache
def binary() -> str:
    from uv import find_uv_bin

    # find_uv_bin reads sysconfig, whose first use is not thread-safe (a second thread sees its variables half
    # made); the two smoke stages make their environments at once.
    with _FINDING:
        return str(find_uv_bin())


def managed_python(version: str, env: Mapping[str, str]) -> str | None:
    """uv's managed install of Python X.Y (``uv python install X.Y`` made it), or None: none, or uv did not run."""
    argv = [binary(), "python", "find", "--managed-python", "--no-project", "--no-config", version]
    try:
        done = signals.run(argv, capture_output=True, text=True, errors="replace", timeout=60, env=dict(env),
                           check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    found = done.stdout.strip()
    return found if done.returncode == 0 and found else None


def url2pathname(path: str) -> str:
    """The local path of a file: URL's path (urllib.request's, which this imports only here: with http and ssl it
    costs 12 ms, and a run that downloads nothing does not need it)."""
    from urllib.request import url2pathname as of_url

    return of_url(path)


def _local_folder(location: str) -> Path | None:
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("http", "https"):
        return None
    return Path(url2pathname(parsed.path)) if parsed.scheme == "file" else Path(location)


def config_args(settings: Mapping[str, Sequence[str]]) -> tuple[list[str], dict[str, str]]:
    """pip's settings as uv flags and variables."""
    args: list[str] = ["--no-config", "--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    if pip_config.is_true(settings, "no-index"):
        args.append("--no-index")
    for url in settings.get("index-url", [])[:1]:
        args += ["--default-index", url]
    for url in settings.get("extra-index-url", []):
        args += ["--index", url]
    for link in settings.get("find-links", []):
        folder = _local_folder(link)
        if folder is None or folder.is_dir():
            args += ["--find-links", link]
    for path in settings.get("constraint", []):
        args += ["--constraint", path]
    for cert in settings.get("cert", [])[:1]:
        env["SSL_CERT_FILE"] = cert
    for timeout in settings.get("default-timeout", [])[:1]:
        env["UV_HTTP_TIMEOUT"] = timeout
    return args, env


def _run(argv: Sequence[str], log: Path, what: str, env: Mapping[str, str] | None = None) -> None:
    try:
        run_tool([binary(), *argv], log=log, env={"UV_NO_PROGRESS": "1", **(env or {})},
                 timeout=TIMEOUT_S, what=what)  # fmt: skip
    except ToolFailed as exc:
        lines = [line.strip().removeprefix("error: ").removeprefix("cause: ") for line in exc.output.splitlines()]
        said = ": ".join(line for line in lines if line and not line.startswith("$"))  # uv's error and its causes
        raise UvError(str(exc), no_match=exc.returncode == NO_SOLUTION, detail=said or str(exc)) from None


def venv(directory: Path, python: str, log: Path) -> None:
    """A fresh virtual environment at ``directory`` for the interpreter ``python`` (a path)."""
    _run(["venv", "--quiet", "--python", python, str(directory)], log, f"uv venv {directory}")


def install(python: Path | str, args: Sequence[str], *, log: Path) -> None:
    """``uv pip install`` into the environment of ``python``, with pip's configuration."""
    flags, env = config_args(pip_config.settings())
    _run(["pip", "install", "--python", str(python), *flags, *args], log, f"uv pip install into {python}", env)


def install_own(python: Path | str, wheel: Path, *, unpack_cache: Path, log: Path) -> None:
    """A build's own wheel (a local file) into the environment of ``python``, without its dependencies, unpacked into
    ``unpack_cache`` rather than uv's shared cache. uv keeps what it unpacks by the file's path and never drops it: a
    new build's wheel, at a new path or with a new time every run, would leave its unpacked copy there for good
    (torch: 700 MB on the CPU, GBs with CUDA, every run). Its dependencies come after, from ``install`` given the same
    file, which finds it installed and unpacks only what the indexes serve, into the shared cache."""
    argv = ["pip", "install", "--python", str(python), "--no-config", "--no-index", "--no-deps", str(wheel)]
    _run(argv, log, f"uv pip install {wheel.name} into {python}", {"UV_CACHE_DIR": str(unpack_cache)})


# --- resolving for a target ------------------------------------------------------------------------------


_LEGACY_MANYLINUX = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}  # PEP 600's glibc of PEP 513/571/599's tags


@functools.cache
def _manylinux_platforms() -> tuple[tuple[str, int, int], ...]:
    """The manylinux platforms this uv accepts for ``--python-platform`` (arch, glibc major, minor), read from its own
    help: the set grows with uv's releases (2_17, 2_28, 2_31 ... 2_40 in uv 0.13) and has gaps (no 2_18-2_27)."""
    try:
        text = signals.run([binary(), "pip", "compile", "--help"], capture_output=True, text=True, errors="replace",
                              timeout=60, check=False).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    found = {(arch, int(major), int(minor)) for arch, major, minor in
             re.findall(r"\b(\w+)-manylinux_(\d+)_(\d+)\b", text)}  # fmt: skip
    return tuple(sorted(found))


def _manylinux(arch: str, glibc: tuple[int, int]) -> str:
    """uv's manylinux platform for a wheel of ``glibc``: the newest uv knows that is not newer than it (uv then takes
    the wheels of that platform and of every older one); below uv's oldest (manylinux1's 2_5, manylinux2010's 2_12),
    uv's oldest, manylinux2014 (its 2_17): pip's download, told the cell's own tags, then takes only those."""
    known = sorted((major, minor) for a, major, minor in _manylinux_platforms() if a == arch)
    fitting = [m for m in known if m <= glibc]
    if fitting:
        return f"{arch}-manylinux_{fitting[-1][0]}_{fitting[-1][1]}"
    return f"{arch}-manylinux2014"


def python_platform(tag: str) -> str:
    """uv's ``--python-platform`` for a wheel platform tag: win_amd64, manylinux_2_28_x86_64, the legacy
    manylinux1/2010/2014 tags and their PEP 600 names (manylinux_2_5 ... : see _manylinux), linux_x86_64."""
    if tag == "win32":
        return "i686-pc-windows-msvc"
    if found := re.fullmatch(r"win_(\w+)", tag):
        return f"{_ARCHES.get(found[1], found[1])}-pc-windows-msvc"
    if found := re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag):
        return _manylinux(_ARCHES.get(found[3], found[3]), (int(found[1]), int(found[2])))
    if found := re.fullmatch(r"manylinux(1|2010|2014)_(\w+)", tag):
        return _manylinux(_ARCHES.get(found[2], found[2]), _LEGACY_MANYLINUX[found[1]])
    if found := re.fullmatch(r"linux_(\w+)", tag):
        return f"{_ARCHES.get(found[1], found[1])}-unknown-linux-gnu"
    raise UserError(f"no uv platform for the wheel platform tag {tag!r}")


@dataclass(frozen=True)
class Target:
    """What a resolution is for: a Python version (X.Y: the series, as a cell names it; or X.Y.Z) and uv's
    platform."""

    python: str
    platform: str

    def args(self) -> list[str]:
        # uv reads X.Y as X.Y.0 and would refuse torch 1.10.2's cp36m wheel (Requires-Python >=3.6.2) for a 3.6
        # cell, which pip (told --ignore-requires-python) takes; a patch above every real one of the series fits.
        python = f"{self.python}.{ANY_PATCH}" if self.python.count(".") == 1 else self.python
        return ["--python-version", python, "--python-platform", self.platform, "--only-binary", ":all:"]


def target_of(pip_args: Sequence[str]) -> Target:
    """The Target of pip's target options (``--python-version X.Y --platform TAG ...``, pip.target_args): the
    first platform tag is the most preferred; without a Python version, this interpreter's."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    tags: list[str] = []
    for flag, value in zip(pip_args, [*pip_args[1:], ""], strict=True):
        if flag == "--python-version":
            python = value
        elif flag == "--platform":
            tags.append(value)
    if not tags:
        raise UserError(f"pip's target options name no platform: {' '.join(pip_args)}")
    return Target(python=python, platform=python_platform(tags[0]))


@dataclass(frozen=True)
class Locked:
    """One wheel the resolver chose: its project, version, where it is and its sha256."""

    name: str
    version: str
    url: str  # https://... or file://...
    sha256: str

    @property
    def filename(self) -> str:
        return urllib.parse.unquote(Path(urllib.parse.urlparse(self.url).path).name)

    @property
    def local_path(self) -> Path | None:
        """The file of a find-links or local-index hit (a file:// URL)."""
        parsed = urllib.parse.urlparse(self.url)
        return Path(url2pathname(parsed.path)) if parsed.scheme == "file" else None


def _wheel_name(wheel: Mapping[str, Any]) -> str:
    where = str(wheel.get("url") or wheel.get("path") or "")
    return str(wheel.get("name") or urllib.parse.unquote(Path(urllib.parse.urlparse(where).path).name))


def _tag_preference(tags: frozenset[Tag]) -> tuple[bool, int, bool, int]:
    """How an installer ranks a wheel's best tag among compatible ones (lower first, packaging.tags' order): a
    platform wheel before ``any``, the interpreter's own ABI before ``abi3`` before ``none``, ``cpXY`` before ``pyX``,
    the newer interpreter first."""

    def rank(tag: Tag) -> tuple[bool, int, bool, int]:
        digits = "".join(c for c in tag.interpreter if c.isdigit())
        abi = {"abi3": 1, "none": 2}.get(tag.abi, 0)
        return (tag.platform == "any", abi, not tag.interpreter.startswith("cp"), -int(digits or 0))

    return min(map(rank, tags))


def _one_wheel(wheels: Sequence[Mapping[str, Any]], source: Path, name: str) -> Mapping[str, Any]:
    """The wheel of a locked package: the only one, or of several for the target (charset-normalizer 3.5.3 offers
    cp39-cp39, cp37-abi3 and py3-none-any to a Windows CPython 3.9) the one an installer prefers (``_tag_preference``),
    of equal tags (a re-upload with a build number: torch-2.10.0-3-cp311-...) the highest build number, as pip
    takes it."""
    if len(wheels) == 1:
        return wheels[0]
    try:
        parsed = [(parse_wheel_filename(_wheel_name(w)), w) for w in wheels]
    except InvalidWheelFilename:
        parsed = []
    if not parsed:
        raise UvError(f"{source}: {name} has {len(wheels)} files for the target, not every one a wheel")
    return min(parsed, key=lambda item: (_tag_preference(item[0][3]), -_build_number(item[0][2])))[1]


def _build_number(build: BuildTag) -> int:
    return build[0] if build else -1


def _locked(text: str, source: Path) -> list[Locked]:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UvError(f"uv wrote {source} that is not TOML: {exc}") from None
    found = []
    for package in raw.get("packages", []):
        wheel = _one_wheel(package.get("wheels") or [], source, str(package.get("name")))
        url = wheel.get("url") or (source.parent / wheel.get("path", "")).resolve().as_uri()
        sha256 = str((wheel.get("hashes") or {}).get("sha256", ""))
        found.append(Locked(str(package["name"]), str(package["version"]), str(url), sha256))
    return found


def lock(requirements: Sequence[str], target: Target, *, log: Path, deps: bool = True) -> list[Locked]:
    """The wheels the configured indexes offer that meet ``requirements`` on ``target`` (``deps``: with everything
    they require there, markers evaluated for the target), one per project. Raises UvError (``no_match`` when
    nothing meets them); what uv said is in ``log``."""
    flags, env = config_args(pip_config.settings())
    with tempfile.TemporaryDirectory(prefix="uv-lock-") as tmp:
        wanted = Path(tmp) / "requirements.in"
        wanted.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        out = Path(tmp) / "pylock.toml"
        # --python: this interpreter, not one uv searches for (a Windows host whose only Python is python.org's
        # embeddable has none on PATH or in the registry; uv then finds nothing and stops). The target is the flags'.
        argv = ["pip", "compile", str(wanted), "--quiet", "--format", "pylock.toml", "-o", str(out),
                "--no-header", "--python", sys.executable, *target.args(), *flags,
                *([] if deps else ["--no-deps"])]  # fmt: skip
        _run(argv, log, f"uv pip compile {' '.join(requirements)} for {target.platform}, Python {target.python}", env)
        return _locked(out.read_text(encoding="utf-8"), out)
