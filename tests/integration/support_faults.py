"""The fault suite's tools: small real packages and wheels (the faults are the channel's, not torch's), a channel as
its users see it (every file an index names is there with the bytes its hash says, nothing half-written), and a
small tmpfs to fill or make read-only (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import ROOT
from tests.integration.support_conda import assemble_small
from torchbuild.channels import pep503
from torchbuild.channels.local_layout import LOCK, MARKER

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


@dataclass(frozen=True)
class Build:
    """One publisher's files: a conda package and a wheel, named as every other build's of the same cell."""

    conda: Path
    wheel: Path

    @property
    def files(self) -> list[Path]:
        return [self.conda, self.wheel]


def small_build(directory: Path, tag: str, *, padding: int = 0, python: str = "3.11") -> Build:
    """A real .conda (py-rattler-build) and wheel whose bytes differ by ``tag`` (``padding`` random bytes more)."""
    directory.mkdir(parents=True, exist_ok=True)
    blob = tag.encode() * 64 + os.urandom(padding)
    cp = python.replace(".", "")
    conda = assemble_small(directory, {"lib/blob.bin": blob}, name="pytorch", version="2.13.0",
                           build=f"py{python}_cpu_0", depends=(f"python >={python},<{python}.0a0",))  # fmt: skip
    wheel = make_wheel(directory, WHEEL.replace("cp311", f"cp{cp}"), {"torch/__init__.py": blob})
    return Build(conda=conda, wheel=wheel)


def publish_argv(channel: Path | str, *files: Path, replace: bool = False) -> list[str]:
    return [sys.executable, str(ROOT / "pipeline.py"), "publish", *map(str, files), "--channel", str(channel),
            *(["--replace"] if replace else [])]  # fmt: skip


def publish(channel: Path | str, *files: Path, replace: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(publish_argv(channel, *files, replace=replace), capture_output=True, text=True,
                          check=False, timeout=300, env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def index_argv(channel: Path | str) -> list[str]:
    return [sys.executable, str(ROOT / "pipeline.py"), "index", "--channel", str(channel)]


def index(channel: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(index_argv(channel), capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder``, dot names and the lock included: a file's bytes, None for a folder."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def children_of(pid: int) -> dict[int, str]:
    """The live child processes of ``pid`` (Linux /proc) with their command lines."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid) and not fields.get("State", "").startswith("Z"):
            found[int(status.parent.name)] = cmdline
    return found


def processes_of(marker: str) -> dict[int, str]:
    """The live processes (Linux /proc, zombies aside) whose command line, working directory or environment names
    ``marker`` (a run's folder): what a run left running. This process and its ancestors (pytest) are left out."""
    ours = {os.getpid(), *_ancestors(os.getpid())}
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid in ours or not alive(pid):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline or cwd.startswith(marker) or marker in environ:
            found[pid] = cmdline
    return found


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        try:
            status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        except OSError:
            break
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        found.append(pid)
    return found


def left_running(marker: str, within_s: float) -> dict[int, str]:
    """``processes_of(marker)`` once none is left or ``within_s`` seconds have passed."""
    deadline = time.monotonic() + within_s
    while (found := processes_of(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
        state = next(line for line in status.splitlines() if line.startswith("State"))
    except (OSError, StopIteration):
        return False
    return "zombie" not in state


def snapshot(channel: Path) -> dict[str, bytes]:
    """Every file of the channel with its bytes (the lock file aside: it is the channel's, never its content)."""
    return {
        str(p.relative_to(channel)): p.read_bytes()
        for p in sorted(channel.rglob("*"))
        if p.is_file() and p.name != LOCK
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def problems(channel: Path) -> list[str]:
    """What a user of the channel would trip over: a file an index names that is missing or has other bytes than
    the index's sha256, a package no index names, a temporary or staged file left behind."""
    files = snapshot(channel)
    found = []
    named: set[str] = set()
    for path, data in files.items():
        if path.endswith("/repodata.json"):
            subdir = path.rsplit("/", 1)[0]
            index = json.loads(data)
            for section in ("packages", "packages.conda"):
                for name, record in index.get(section, {}).items():
                    named.add(f"{subdir}/{name}")
                    got = files.get(f"{subdir}/{name}")
                    if got is None or sha256(got) != record["sha256"]:
                        found.append(f"{subdir}/{name}: {'missing' if got is None else 'bytes differ from repodata'}")
        elif re.fullmatch(r"whl/(nightly/)?simple/[^/]+/index\.html", path):  # a project page, releases' or nightlies'

            folder = path.rsplit("/", 1)[0]
            for name, digest in pep503.wheel_links(data.decode()).items():
                named.add(f"{folder}/{name}")
                got = files.get(f"{folder}/{name}")
                side = files.get(f"{folder}/{name}.sha256", b"").decode().split()
                if got is None or sha256(got) != digest:
                    found.append(f"{folder}/{name}: {'missing' if got is None else 'bytes differ from its page'}")
                elif side[:1] != [digest]:
                    found.append(f"{folder}/{name}.sha256 differs from the page")
    for path in files:
        if path == MARKER:
            continue
        if path.endswith((".conda", ".tar.bz2", ".whl")) and path not in named:
            found.append(f"{path}: in the channel, named by no index")
        if any(part.startswith(".") for part in path.split("/")) or path.endswith((".tmp", ".part")):
            found.append(f"{path}: a temporary file left behind")
    return found


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Mount]:
    """A 4 MiB tmpfs mounted below tmp_path (root only)."""
    if os.geteuid() != 0:
        pytest.skip("skipped: mounting a small tmpfs (full or read-only channel) needs root")
    where = tmp_path / "mnt"
    where.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"skipped: this machine mounts no tmpfs here ({made.stderr.strip()})")
    try:
        yield Mount(where)
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@dataclass(frozen=True)
class Mount:
    path: Path

    def read_only(self, on: bool = True) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path)], check=True)

    def fill(self, leave: int) -> Path:
        """Fill the file system but ``leave`` bytes; the filler file, to delete to make room again."""
        filler = self.path / "filler"
        stats = os.statvfs(self.path)
        free = stats.f_bavail * stats.f_frsize
        with filler.open("wb") as out:
            out.write(b"\0" * max(0, free - leave))
        return filler


def outputs(results: Sequence[subprocess.CompletedProcess[str]]) -> str:
    return "\n".join(f"exit {r.returncode}\n{r.stdout}\n{r.stderr}" for r in results)
