"""torch.compile's check once per content: an environment whose every input to it equals one checked before reads
that result instead of compiling again.

What torch.compile does in an environment is decided by what it reads there: the Python files and libraries of
torch and of its dependencies (sympy, jinja2, ...), the interpreter and its headers, the C++ compiler, the CPU and
the environment variables. Those are hashed (a file by its bytes; a distribution's metadata by its name and version
only, because the conda package rewrites torch's METADATA and pip records where each wheel came from); the
environment's own folder is not, because it reaches the compile only as -I/-L flags to files that are hashed. So a
wrong dependency pin, a changed header, a file a conda install rewrote, another compiler or CPU is another key and
compiles afresh, and a second environment of the same content (the conda prefix after the wheel's venv) would
compile the same kernels from the same sources with the same compiler. Only a passed check is kept; where a GPU is
present (inductor's Triton kernels), nothing is shared. Two environments of one content wait for each other rather
than compile twice. The folder comes in SHARED_ENV; where it is not set (a user's own run) every environment
compiles. Linux only (the check runs on Linux hosts). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from . import digests
from .smoke_base import Outcome

SHARED_ENV = "TORCHBUILD_SMOKE_COMPILED"
# set by the check itself; where the shell was (the check runs in a folder of its own); torchbuild's own, which
# torch does not read (TORCHBUILD_*)
IGNORED_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "PWD", "OLDPWD", "SHLVL", "_")


def shared_dir() -> Path | None:
    raw = os.environ.get(SHARED_ENV)
    return Path(raw) if raw else None


def content_key(site_packages: Path, compiler: str) -> str:
    """sha256 over what torch.compile reads in this environment (the module's docstring says what and why)."""
    digest = hashlib.sha256()
    for text in _host_inputs(compiler):
        digest.update(text.encode() + b"\0")
    # a .dist-info folder by its name only (name and version): the conda package rewrites torch's METADATA and
    # installers record where a wheel came from, neither read by torch.compile
    for relative, file_digest in digests.tree(site_packages, by_name=lambda folder: folder.endswith(".dist-info")):
        digest.update(relative.encode() + b"\0" + file_digest)
    include = Path(sysconfig.get_paths()["include"])
    for relative, file_digest in digests.tree(include):
        digest.update(b"include/" + relative.encode() + b"\0" + file_digest)
    return digest.hexdigest()


def _host_inputs(compiler: str) -> list[str]:
    interpreter = digests.file_digest(Path(os.path.realpath(sys.executable))).hex()
    described = subprocess.run([compiler, "-v"], capture_output=True, text=True, errors="replace", check=False)
    variables = sorted(
        f"{name}={value}"
        for name, value in os.environ.items()
        if name not in IGNORED_VARIABLES and not name.startswith("TORCHBUILD_")
    )
    return [sys.version, interpreter, os.path.realpath(compiler), described.stdout + described.stderr,
            _cpu_flags(), *variables]  # fmt: skip


def _cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return next((line for line in text.splitlines() if line.startswith("flags")), "")


@contextmanager
def _locked(shared: Path, key: str) -> Iterator[bool]:
    """Holds the lock of ``key``; yields False (nothing shared) where the folder cannot be written."""
    import fcntl  # Linux only, like the check

    try:
        shared.mkdir(parents=True, exist_ok=True)
        handle = (shared / f"{key}.lock").open("a")
    except OSError:
        yield False
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def once(shared: Path, key: str, check: Callable[[], Outcome]) -> Outcome:
    """``check()`` run here, or the kept passed outcome of an environment with the same ``key``, said so. Waits
    while another environment of the same key checks; keeps an outcome only where it passed. A folder that cannot be
    written (read-only, full) shares nothing and fails nothing: the check runs here."""
    entry = shared / f"{key}.json"
    with _locked(shared, key) as sharing:
        kept = _read(entry) if sharing else None
        if kept is not None:
            same = "torch, its dependencies, the interpreter, the compiler, the CPU and the environment variables"
            return Outcome("passed", f"{kept['message']}; checked in an environment of the same content at "
                           f"{kept['when']}, not compiled again here ({same} are the same byte for byte: key "
                           f"{key[:12]}...)")  # fmt: skip
        outcome = check()
        if outcome.status == "passed" and sharing:
            _keep(entry, key, outcome.message)
    return outcome


def _keep(entry: Path, key: str, message: str) -> None:
    handle, made = tempfile.mkstemp(prefix=f".{key[:16]}-", dir=entry.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())  # the same on every host that reads it
            json.dump({"message": message, "when": when, "key": key}, out)
        os.replace(made, entry)
    except OSError:  # a full disk: the next environment compiles again
        Path(made).unlink(missing_ok=True)


def _read(entry: Path) -> dict[str, str] | None:
    try:
        kept = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or not isinstance(kept.get("message"), str) or entry.stem != kept.get("key"):
        return None
    return {"message": kept["message"], "when": str(kept.get("when", "an earlier time"))}
