"""Every process torchbuild starts ends with it, with what it started (host/orphans.py, through host/signals.py): a
pipeline killed outright (kill -9: no handler of ours runs), a tool's timeout, and a watcher's command (the Wine
sessions' ``wineserver -k``). Each tool here starts a grandchild that appends to a file every 0.1 s: a file that
stops growing says the grandchild was ended."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchbuild.host import orphans, signals

ROOT = Path(__file__).resolve().parents[2]
TREE = """\
import os, subprocess, sys, time
beats = sys.argv[1]
beat = "import sys, time\\nfor _ in range(600):\\n    open(sys.argv[1], 'a').write('.')\\n    time.sleep(0.1)\\n"
subprocess.Popen([sys.executable, '-c', beat, beats])
while not os.path.exists(beats):
    time.sleep(0.05)
time.sleep(60)
"""
# A pipeline: a tool run through signals.run (and a watcher beside it), then killed outright by the test.
PIPELINE = """\
import sys
from torchbuild.host import orphans, signals
watched = orphans.watcher([sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('ran')", sys.argv[2]])
signals.run([sys.executable, "-c", sys.argv[3], sys.argv[1]], timeout=120)
"""

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="skipped: the launcher is Linux's")


def _stopped(beats: Path) -> bool:
    """Whether the grandchild has stopped beating (it had started)."""
    deadline = time.monotonic() + 30
    while not beats.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    size = beats.stat().st_size
    time.sleep(1.0)
    return beats.stat().st_size == size


@linux_only
def test_a_killed_pipeline_takes_its_tools_children_with_it_and_runs_its_watchers(tmp_path: Path) -> None:
    # Before: only the tool itself died with the pipeline (PR_SET_PDEATHSIG reaches the tool, not what it started),
    # and nothing ran a command when the pipeline died.
    beats, said = tmp_path / "beats", tmp_path / "said"
    pipeline = subprocess.Popen([sys.executable, "-c", PIPELINE, str(beats), str(said), TREE], cwd=ROOT)
    deadline = time.monotonic() + 30
    while not beats.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pipeline.kill()
    pipeline.wait()
    assert _stopped(beats), "the tool's child still runs after the pipeline was killed"
    deadline = time.monotonic() + 10
    while not said.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said.read_text() == "ran"


def test_a_tools_timeout_ends_what_it_started(tmp_path: Path) -> None:
    beats = tmp_path / "beats"
    with pytest.raises(subprocess.TimeoutExpired):
        signals.run([sys.executable, "-c", TREE, str(beats)], timeout=3)
    assert _stopped(beats), "the tool's child still runs after the tool's timeout"


@linux_only
def test_a_released_watcher_runs_nothing_and_an_ended_one_runs_its_command(tmp_path: Path) -> None:
    said = tmp_path / "said"
    command = [sys.executable, "-c", "import sys; open(sys.argv[1], 'a').write('ran')", str(said)]
    released = orphans.watcher(command)
    assert released is not None
    orphans.release(released)
    assert released.returncode == 0 and not said.exists()  # it said it was ready: its handlers were set
    ended = orphans.watcher(command)
    assert ended is not None
    orphans.end(ended)
    ended.wait(30)
    assert said.read_text() == "ran"


def test_a_missing_program_is_named_as_popen_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-tool-here"):
        signals.run(["no-such-tool-here", "--version"])


def test_every_process_torchbuild_starts_goes_through_host_orphans() -> None:
    """subprocess.run/Popen/call/check_output and os.system anywhere else would start a process that outlives a
    killed run. The smoke's resources run inside the fresh environment (no torchbuild there): the harness's children
    are in its process group, which the launcher ends."""
    starters = {"run", "Popen", "call", "check_call", "check_output", "system", "spawnv", "spawnl", "startfile"}
    found = []
    for path in sorted((ROOT / "torchbuild").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative == "torchbuild/host/orphans.py" or relative.startswith("torchbuild/stages/smoke/resources/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in starters
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("subprocess", "os")):
                found.append(f"{relative}:{node.lineno}: {node.func.value.id}.{node.func.attr}")
    assert found == []
