"""Every pip call torchbuild makes, in one place, on top of ``proc.run_tool``: downloads of wheels for a target
platform (prebuilt torch wheels, DLL provider wheels, CUDA toolkit wheels) and the arguments of an install.

Which wheel a download takes is chosen by uv's resolver for the target (uv.lock: a pylock.toml, read as TOML);
pip then fetches exactly that file (``name @ url#sha256=...``, so pip checks the hash) with its own network
settings. No text pip prints is read: its output goes to the log, or to the terminal for a download a user waits
on. pip's configuration (pip_config.py: pip.conf, PIP_* variables, find-links, constraints) is in force for both:
what pip would not give a user (a release above a constraint, a platform an index does not serve) torchbuild does
not take either.
"""

from __future__ import annotations

import hashlib
import sys
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.host import uv
from torchbuild.host.files import link
from torchbuild.host.proc import ToolFailed, run_tool

TIMEOUT_S = 1800


class PipError(UserError):
    """A wheel could not be had; ``detail`` is what the resolver or pip said. ``no_match``: the indexes have no such
    distribution (as opposed to a failed download or an index that does not answer)."""

    def __init__(self, message: str, *, no_match: bool = False, detail: str = "") -> None:
        super().__init__(message)
        self.no_match = no_match
        self.detail = detail or message


@dataclass(frozen=True)
class Fetched:
    """One file ``download`` put in its destination, and where it came from."""

    path: Path
    url: str  # file:// for a find-links or local-index hit, else the index's https:// URL
    downloaded: bool  # fetched over the network in this call (not found already in the destination)

    @property
    def local_source(self) -> Path | None:
        """The original file of a file:// hit (the copy in the destination is a scratch copy)."""
        parsed = urllib.parse.urlparse(self.url)
        return Path(uv.url2pathname(parsed.path)) if parsed.scheme == "file" else None


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def download(
    requirements: Sequence[str],
    dest: Path,
    *,
    log: Path,
    target: Sequence[str] = (),
    live: bool = False,
    timeout: float = TIMEOUT_S,
) -> list[Fetched]:
    """The wheel of each of ``requirements`` (no dependencies) for ``target`` (pip's options, ``target_args``) in
    ``dest``, as uv's resolver chooses it and ``fetch`` fetches it. Raises PipError; uv's and pip's words are in
    ``log``."""
    try:
        chosen = uv.lock(requirements, uv.target_of(target), log=log, deps=False)
    except uv.UvError as exc:
        message = f"no wheel {' '.join(requirements)}: {exc.detail} (log: {log})"
        raise PipError(message, no_match=exc.no_match, detail=exc.detail) from None
    return fetch(chosen, dest, log=log, target=target, live=live, timeout=timeout)


def fetch(
    wheels: Sequence[uv.Locked],
    dest: Path,
    *,
    log: Path,
    target: Sequence[str] = (),
    live: bool = False,
    timeout: float = TIMEOUT_S,
) -> list[Fetched]:
    """The files of ``wheels`` (the resolver's choice) in ``dest``: one already there with the sha256 the index
    gives is used as it is; a file:// hit is copied (linked) there; the others are downloaded by pip (``target``:
    pip's options for a wheel of another platform; ``live``: its progress bar on the terminal)."""
    dest.mkdir(parents=True, exist_ok=True)
    fetched: dict[str, Fetched] = {}
    wanted: list[uv.Locked] = []
    for wheel in wheels:
        path = dest / wheel.filename
        original = wheel.local_path
        if original is not None:
            if not path.is_file():
                link(original, path)
            fetched[wheel.name] = Fetched(path, wheel.url, downloaded=False)
        elif path.is_file() and _sha256(path) == wheel.sha256:
            fetched[wheel.name] = Fetched(path, wheel.url, downloaded=False)
        else:
            path.unlink(missing_ok=True)
            wanted.append(wheel)
    if wanted:
        what = " ".join(f"{w.name}=={w.version}" for w in wanted)
        urls = [f"{w.name} @ {w.url}" + (f"#sha256={w.sha256}" if w.sha256 else "") for w in wanted]
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(dest),
                "--progress-bar", "on" if live else "off", *target, *urls]  # fmt: skip
        try:
            run_tool(argv, log=log, timeout=timeout, what=f"pip download {what}", live=live)
        except ToolFailed as exc:
            raise PipError(f"downloading {what} failed: {exc}", detail=str(exc)) from None
        for wheel in wanted:
            path = dest / wheel.filename
            if not path.is_file():
                raise PipError(f"pip download {wheel.url} left no {path.name} in {dest}; see {log}")
            fetched[wheel.name] = Fetched(path, wheel.url, downloaded=True)
    return [fetched[wheel.name] for wheel in wheels]


def install_argv(args: Sequence[str]) -> list[str]:
    """The arguments after the interpreter of a ``pip install`` (the build stage streams its own)."""
    return ["-I", "-m", "pip", "install", "--no-input", "--progress-bar", "off", *args]
