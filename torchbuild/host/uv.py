"""uv, the installer the smoke environments are made with (the one wrapper of it): ``uv venv`` and ``uv pip
install`` do what ``python -m venv`` and ``pip install`` do, and link a wheel's files from uv's cache instead of
copying them.

uv reads no pip configuration, so the configuration pip is given here (pip.conf, PIP_* variables: index URLs,
find-links, constraints, certificate, timeout; ``pip config list``) is handed to uv as flags and variables: an
environment gets what a user's pip would install, and nothing pip would refuse. With several indexes, uv takes
the best match over all of them, as pip does (``--index-strategy unsafe-best-match``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild.host import pip
from torchbuild.host.proc import ToolFailed, run_tool

TIMEOUT_S = 1800


class UvError(RuntimeError):
    """uv failed; the message says what it was doing and its last lines."""


_FINDING = threading.Lock()


@functools.cache
def binary() -> str:
    from uv import find_uv_bin

    # find_uv_bin reads sysconfig, whose first use is not thread-safe (a second thread sees its variables half
    # made); the two smoke stages make their environments at once.
    with _FINDING:
        return str(find_uv_bin())


@functools.cache
def pip_settings() -> dict[str, list[str]]:
    """pip's configuration as pip would apply it (read once per process)."""
    return pip.settings()


def config_args(settings: Mapping[str, Sequence[str]]) -> tuple[list[str], dict[str, str]]:
    """pip's settings as uv flags and variables."""
    args: list[str] = ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    for url in settings.get("index-url", [])[:1]:
        args += ["--default-index", url]
    for url in settings.get("extra-index-url", []):
        args += ["--index", url]
    for link in settings.get("find-links", []):
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
        run_tool([binary(), *argv], stage="", log=log, env={"UV_NO_PROGRESS": "1", **(env or {})},
                 timeout=TIMEOUT_S, what=what)  # fmt: skip
    except ToolFailed as exc:
        raise UvError(str(exc)) from None


def venv(directory: Path, python: str, log: Path) -> None:
    """A fresh virtual environment at ``directory`` for the interpreter ``python`` (a path)."""
    _run(["venv", "--quiet", "--python", python, str(directory)], log, f"uv venv {directory}")


def install(python: Path | str, args: Sequence[str], *, log: Path) -> None:
    """``uv pip install`` into the environment of ``python``, with pip's configuration."""
    flags, env = config_args(pip_settings())
    _run(["pip", "install", "--python", str(python), *flags, *args], log, f"uv pip install into {python}", env)
