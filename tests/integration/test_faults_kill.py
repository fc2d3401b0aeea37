"""Fault suite, stopping a run: SIGTERM (a cancelled CI job), SIGINT (Ctrl-C) and SIGHUP (a closed terminal) at the
start of each stage, and a second run in the same directory. A stopped run says so and how to resume, exits as a
shell expects (128 + the signal), leaves no scratch in memory and no partial artifact under a final name; the
rerun of the same command resumes. A small torch stand-in wheel (a real wheel of random bytes, big enough that
assembling its package takes a moment) makes the run quick: the faults are the runner's, not torch's."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.conftest import REPODATA, ROOT

PLAN = torch_plan()
RAM = Path("/dev/shm")


class Running:
    """``python pipeline.py run`` for the stand-in wheel, its output collected line by line as it comes."""

    def __init__(self, workspace: Path, wheel: Path, scratch: str = "auto") -> None:
        cell = ["--platform", "linux-64", "--cuda", "cpu", "--py", "3.11", "--torch", "2.13.0"]
        argv = [sys.executable, str(ROOT / "pipeline.py"), "run", *cell, "--wheel", str(wheel), "--matrix",
                str(ROOT / "matrix.yaml"), "--channel", str(workspace / "channel"), "--compression-level", "1",
                "--repodata", str(REPODATA)]  # fmt: skip
        env = {**os.environ, "COLUMNS": "200", "SOURCE_DATE_EPOCH": "1700000000", "TORCHBUILD_SCRATCH": scratch}
        self.proc = subprocess.Popen(argv, cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None or self._reader.is_alive(), f"ended before {text!r}:\n{self.output}"
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n{self.output}"
            time.sleep(0.02)

    def finish(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not REPODATA.is_dir():
        pytest.skip(f"skipped: the real repodata is not at {REPODATA}")
    payload = {"torch/__init__.py": b"__version__ = '2.13.0+cpu'\n", "torch/lib/blob.bin": os.urandom(24 << 20)}
    return make_wheel(tmp_path_factory.mktemp("wheel"), PLAN.root.wheel, payload)


def _unheld_scratch(before: set[str]) -> list[str]:
    """Scratch directories in memory made since ``before`` that no live process holds (left by a stopped run)."""
    left = []
    for entry in RAM.glob("torchbuild-*"):
        if entry.name in before or not entry.is_dir():
            continue
        fd = os.open(entry, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            left.append(entry.name)
        except BlockingIOError:
            pass  # another run's, alive
        finally:
            os.close(fd)
    return left


def _partial_artifacts(build: Path) -> list[str]:
    """Packages and wheels under the build directory that are not whole archives, or half-made files."""
    found = []
    for path in build.rglob("*"):
        if path.name.startswith(".assembling-") or path.name.endswith((".part", ".tmp")):
            found.append(f"{path}: a half-made file or folder")
        elif path.is_file() and path.name.endswith((".conda", ".whl")):
            try:
                with zipfile.ZipFile(path) as archive:
                    bad = archive.testzip()
            except zipfile.BadZipFile as exc:
                bad = str(exc)
            if bad is not None:
                found.append(f"{path}: not a whole archive ({bad})")
    return found


@pytest.mark.parametrize(
    ("stage", "signum"),
    [
        ("source", signal.SIGTERM),
        ("repair", signal.SIGINT),
        ("conda", signal.SIGTERM),  # before: the unpacked wheel left in /dev/shm, a partial .conda under its name
        ("verify", signal.SIGHUP),
        ("smoke-wheel", signal.SIGTERM),
        ("smoke-conda", signal.SIGINT),
    ],
)
def test_a_run_stopped_at_a_stage_says_so_and_leaves_nothing_half_made(
    stage: str, signum: signal.Signals, wheel: Path, tmp_path: Path
) -> None:
    before = {entry.name for entry in RAM.glob("torchbuild-*")}
    stale = tmp_path / "build" / "report.json"  # an earlier run's, saying publish passed
    stale.parent.mkdir()
    stale.write_text(json.dumps({"cells": [{"cell_id": PLAN.cell_id, "ok": True, "stages": [
        {"stage": "publish", "status": "passed"}]}]}))  # fmt: skip
    run = Running(tmp_path, wheel)
    run.wait_for(f"▶ {stage} ")
    run.proc.send_signal(signum)
    code = run.finish()
    name = signal.Signals(signum).name
    assert code == 128 + signum, run.output
    assert f"interrupted ({name}): finished stages are kept" in run.output
    assert "rerun the same command to resume" in run.output and "Traceback" not in run.output, run.output
    assert _unheld_scratch(before) == [], run.output
    assert _partial_artifacts(tmp_path / "build") == []
    assert not (tmp_path / "channel").exists(), "publish ran, or a stopped run wrote to the channel"
    assert not stale.exists() or '"publish", "status": "passed"' not in stale.read_text(), "the last run's report"
    if stage == "conda":  # the same command resumes: the finished stages are not run again
        again = Running(tmp_path, wheel, scratch="disk")
        again.finish()
        assert "source      cached" in again.output, again.output
        state = json.loads((tmp_path / PLAN.work_dir / "state.json").read_text())
        assert state["stages"]["conda"]["status"] == "passed", again.output
        assert _partial_artifacts(tmp_path / "build") == []


def test_a_second_run_in_the_same_directory_is_refused_with_a_message(wheel: Path, tmp_path: Path) -> None:
    # Before: one of the two died with a traceback, the other's state and artifacts overwritten.
    first = Running(tmp_path, wheel, scratch="disk")  # nothing kept in memory if it gets as far as a failed smoke
    first.wait_for("▶ source ")
    second = Running(tmp_path, wheel, scratch="disk")
    assert second.finish() == 2, second.output
    assert "another torchbuild run is using" in second.output and "Traceback" not in second.output
    assert first.proc.poll() is None, "the first run was disturbed"
    first.proc.send_signal(signal.SIGINT)
    assert first.finish() == 128 + signal.SIGINT, first.output
