"""A real Wine session pinned to a CPU (platforms/windows/wine_cpus.py): its wineserver runs there, and so does each
program it starts. And the prefix template those sessions copy, made once on an empty cache."""

from __future__ import annotations

import concurrent.futures
import os
import sys
from pathlib import Path

import pytest

from torchbuild.config.options import RunOptions
from torchbuild.platforms.windows import wine, wine_cpus

pytestmark = pytest.mark.usefixtures("needs_wine")


def _processes_of(prefix: Path) -> dict[int, str]:
    """The processes whose WINEPREFIX is ``prefix`` (its wineserver, the services wineboot started): pid -> name."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            ours = f"WINEPREFIX={prefix}".encode() in (entry / "environ").read_bytes().split(b"\0")
            if entry.name.isdigit() and ours:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
    return found


def test_a_sessions_server_and_programs_run_on_the_cpu_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = wine.find()
    assert found is not None
    last = max(os.sched_getaffinity(0))  # one of this host's CPUs, pinned whatever its number of CPUs
    monkeypatch.setattr(wine_cpus, "HOST", wine_cpus.Cpus([last], pin=True))
    prefix = wine.fresh_prefix(found, RunOptions().cache_dir, tmp_path / "prefix")
    with wine.Session(found, prefix) as session:
        assert session.cpu == last
        # the session's watcher (host/orphans.py: this host's python, idle until the pipeline dies) is no Wine process
        running = {pid: name for pid, name in _processes_of(prefix).items() if name != sys.executable}
        assert any("wineserver" in name for name in running.values()), running
        assert any(name.lower().endswith(".exe") for name in running.values()), running  # services.exe, ...
        off = {name: os.sched_getaffinity(pid) for pid, name in running.items() if os.sched_getaffinity(pid) != {last}}
        assert off == {}
        ran = session.run(["cmd", "/c", "echo", "pinned"], timeout=120)
        assert ran.returncode == 0 and "pinned" in ran.stdout
    assert session.cpu is None and wine_cpus.HOST.take() == last  # given back: the CPU has no session


def test_two_runs_on_an_empty_cache_boot_one_prefix_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: each booted a prefix of its own (wineboot --init, seconds of CPU) and the second one's was dropped.
    found = wine.find()
    assert found is not None
    made: list[Path] = []
    make = wine._make_template

    def counted(how: wine.Wine, path: Path, user: str | None) -> None:  # the real one, counted
        made.append(path)
        make(how, path, user)

    monkeypatch.setattr(wine, "_make_template", counted)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        paths = list(pool.map(lambda _: wine.template(found, tmp_path / "cache"), range(2)))
    assert len(made) == 1 and paths[0] == paths[1] == made[0]
    assert (made[0] / ".complete").is_file() and _processes_of(made[0]) == {}
