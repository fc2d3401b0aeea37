"""py-rattler calls, made in a child process.

py-rattler 0.28 runs its async work on a tokio runtime that races the interpreter's shutdown (the
pyo3-async-runtimes shutdown issue): a process that called ``index_fs``, ``solve`` or ``install`` can die with
SIGSEGV or SIGABRT at exit, after its work was done (about one in five of those tried). Neither the pipeline nor the
test runner may be that process, so each call runs in ``python -m torchbuild.conda.rattler_child``, which answers
with one JSON line and leaves through ``os._exit``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from torchbuild.errors import UserError
from torchbuild.host import signals


class RattlerError(UserError):
    """A py-rattler call failed; ``kind`` is the exception's class name (e.g. SolverError)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def call(operation: str, timeout: float | None = None, **arguments: Any) -> Any:
    """Run ``operation`` (see OPERATIONS) with JSON-able ``arguments``; return its JSON result."""
    request = json.dumps({"operation": operation, "arguments": arguments})
    try:
        proc = signals.run(  # ended when the run is stopped, also where a stage thread started it
            [sys.executable, "-m", "torchbuild.conda.rattler_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True, errors="replace",
            timeout=timeout,
            env=_child_env(),
            input_text=request,
        )
    except subprocess.TimeoutExpired:
        raise RattlerError("timeout", f"py-rattler {operation} took longer than {timeout:.0f} s") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RattlerError(
            "crash", f"py-rattler {operation} ended without an answer (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    answer = json.loads(lines[-1])
    if "error" in answer:
        raise RattlerError(answer["kind"], answer["error"])
    return answer["result"]


def _child_env() -> dict[str, str]:
    """This process's environment, with torchbuild importable in the child from any working directory."""
    package_parent = str(Path(__file__).resolve().parents[2])  # the folder that holds the torchbuild package
    paths = [package_parent, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


child_env = _child_env  # for the other py-rattler(-build) children (conda/assembly.py)


# --- the child's side -------------------------------------------------------------------------------------


def _virtual(packages: dict[str, str]) -> list[Any]:
    from rattler import GenericVirtualPackage, PackageName, Version
    from rattler.package import BuildString

    result: list[Any] = []
    for name, value in packages.items():
        version, _, build = value.partition("=")  # "1=x86_64" gives __archspec its build string
        result.append(GenericVirtualPackage(PackageName(name), Version(version), BuildString(build or "0")))
    return result


async def _solve(
    sources: list[str],
    specs: list[str],
    platform: str,
    virtual_packages: dict[str, str],
    cache_dir: str,
    timeout_s: float,
) -> list[dict[str, Any]]:
    from rattler import ChannelPriority, Gateway, MatchSpec, solve

    records = await solve(
        sources=sources,
        specs=[MatchSpec(s, strict=False) for s in specs],
        platforms=[platform, "noarch"],  # type: ignore[list-item]
        virtual_packages=_virtual(virtual_packages),
        channel_priority=ChannelPriority.Strict,
        gateway=Gateway(cache_dir=Path(cache_dir)),
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return [
        {
            "name": str(r.name.normalized),
            "version": str(r.version),
            "build": str(r.build),
            "build_number": int(r.build_number),
            "subdir": str(r.subdir),
            "channel": str(r.channel),
            "file_name": str(r.file_name),
            "url": str(r.url),
        }
        for r in records
    ]


async def _index(directory: str, write_zst: bool) -> None:
    from rattler.index import index_fs

    await index_fs(Path(directory), write_zst=write_zst, write_shards=False, force=True)


async def _package_subdir(path: str) -> str:
    from rattler import RepoDataRecord

    record = await RepoDataRecord.from_package_archive(Path(path))
    return str(record.subdir)


async def _install_archive(
    archive: str, prefix: str, cache_dir: str, beside: list[str] | None = None
) -> dict[str, Any]:
    """Link one package file, and those ``beside`` it, into ``prefix`` in one transaction (no solve): what
    smoke-conda's environment needs. One transaction: rattler's install leaves the prefix holding exactly the
    records it is given, so a second install of a companion alone would unlink torch's package."""
    from rattler import RepoDataRecord, install

    record = await RepoDataRecord.from_package_archive(Path(archive))
    others = [await RepoDataRecord.from_package_archive(Path(path)) for path in beside or []]
    await install([record, *others], target_prefix=Path(prefix), cache_dir=Path(cache_dir), show_progress=False)
    return {"record": str(record), "depends": [str(d) for d in record.depends]}


async def _extract(archive: str, dest: str) -> str:
    """Unpack a package file's contents (its payload and info/) into ``dest``, as conda lays them out in a prefix."""
    from rattler.package_streaming import extract

    extract(Path(archive), Path(dest))
    return dest


OPERATIONS: dict[str, Callable[..., Coroutine[Any, Any, Any]]] = {
    "solve": _solve,
    "index": _index,
    "package_subdir": _package_subdir,
    "install_archive": _install_archive,
    "extract": _extract,
}


def _main() -> None:
    import asyncio  # the child's alone: the parent, every run of the pipeline, does without its 0.1 s import

    request = json.loads(sys.stdin.read())
    try:
        result = asyncio.run(OPERATIONS[request["operation"]](**request["arguments"]))
        answer: dict[str, Any] = {"result": result}
    except Exception as exc:  # the parent turns it into a RattlerError
        answer = {"error": str(exc).strip() or type(exc).__name__, "kind": type(exc).__name__}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    _main()
