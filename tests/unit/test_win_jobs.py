"""The run's Windows job object (host/win_jobs.py): every child started suspended, put in the job (and a build's own
job inside it), and only then resumed; a job refused is said and the child still runs; a child that cannot be
resumed is ended, never left suspended; one job for the whole run.

The order of the OS calls is checked on any host with a FAKE kernel (it records calls; a real child process stands
for the suspended one). On Windows (and under Wine: tests/under_wine.txt) the real calls run: a child of the run is in
its job, and a killed pipeline takes the child's whole tree with it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from torchbuild.host import signals, win_jobs
from torchbuild.host.win_jobs import CREATE_SUSPENDED, Job, JobError, RunJob

ROOT = Path(__file__).resolve().parents[2]


class FakeKernel:
    """A FAKE Kernel32 (Windows' calls cannot run on Linux): it records each call and refuses those it is told to."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse = refuse
        self.jobs = 0

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.refuse:
            raise JobError(5, f"{call[0]} failed (Windows error 5)")

    def create_job(self) -> int:
        self.jobs += 1
        self._call("create_job")
        return 100 + self.jobs

    def assign(self, job: int, pid: int) -> None:
        self._call("assign", job, pid)

    def resume(self, pid: int) -> None:
        self._call("resume", pid)

    def terminate(self, job: int, exit_code: int) -> bool:
        self._call("terminate", job)
        return True

    def close(self, handle: int) -> None:
        self._call("close", handle)


def _start(flags_seen: list[int]) -> win_jobs.Start:
    """A real child (it stands for the suspended one) and the creation flags it was asked for."""

    def start(flags: int) -> subprocess.Popen[Any]:
        flags_seen.append(flags)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

    return start


def test_each_child_starts_suspended_is_put_in_the_run_job_and_only_then_resumed() -> None:
    kernel = FakeKernel()
    run_job = RunJob(lambda: kernel)
    build_job = Job.new(kernel)
    flags: list[int] = []
    first = run_job.start(_start(flags))
    second = run_job.start(_start(flags), also=[build_job])
    try:
        assert flags == [CREATE_SUSPENDED, CREATE_SUSPENDED]
        run, build = 102, 101  # the build's job was made first, the run's at the first child
        assert kernel.calls == [
            ("create_job",), ("create_job",),
            ("assign", run, first.pid), ("resume", first.pid),
            ("assign", run, second.pid), ("assign", build, second.pid), ("resume", second.pid),
        ]  # fmt: skip
        assert kernel.jobs == 2 and run_job.said == []  # one job for the run, whatever the number of children
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_a_child_the_job_refuses_still_runs_and_it_is_said() -> None:
    kernel = FakeKernel(refuse=("assign",))
    run_job = RunJob(lambda: kernel)
    proc = run_job.start(_start([]))
    try:
        assert kernel.calls[-1] == ("resume", proc.pid) and proc.poll() is None
        assert run_job.said[0].startswith(f"process {proc.pid} ({sys.executable}) runs outside a job, so it may "
                                          "outlive a killed run: assign failed (Windows error 5)")  # fmt: skip
    finally:
        proc.kill()
        proc.wait()


def test_no_job_for_the_run_is_said_once_and_children_start_as_they_are() -> None:
    kernel = FakeKernel(refuse=("create_job",))
    run_job = RunJob(lambda: kernel)
    flags: list[int] = []
    procs = [run_job.start(_start(flags)) for _ in range(2)]
    for proc in procs:
        proc.kill()
        proc.wait()
    assert flags == [0, 0] and kernel.calls == [("create_job",)]  # tried once
    assert run_job.said == ["no job object for this run's processes, so they may outlive a killed run: create_job "
                            "failed (Windows error 5)"]  # fmt: skip


def test_a_child_that_cannot_be_resumed_is_ended_and_the_error_raised() -> None:
    kernel = FakeKernel(refuse=("resume",))
    started: list[subprocess.Popen[Any]] = []

    def start(flags: int) -> subprocess.Popen[Any]:
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]))
        return started[-1]

    with pytest.raises(JobError, match="resume failed"):
        RunJob(lambda: kernel).start(start)
    assert started[0].returncode is not None  # ended, not left suspended


# --- the real calls: Windows, or Wine ---------------------------------------------------------------------------

windows_only = pytest.mark.skipif(sys.platform != "win32", reason="skipped: job objects are Windows' (under_wine.txt)")
TREE = """\
import subprocess, sys, time
beat = "import sys, time\\nfor _ in range(600):\\n    open(sys.argv[1], 'a').write('.')\\n    time.sleep(0.1)\\n"
subprocess.Popen([sys.executable, '-c', beat, sys.argv[1]])
time.sleep(60)
"""
PIPELINE = """\
import sys
from torchbuild.host import signals
signals.run([sys.executable, "-c", sys.argv[2], sys.argv[1]], timeout=120)
"""


@windows_only
def test_a_child_of_the_run_is_in_its_job_from_its_start() -> None:
    import ctypes

    proc = signals.start([sys.executable, "-c", "import time; time.sleep(30)"])
    job = win_jobs.RUN.job()
    try:
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
        kernel32.OpenProcess.restype = ctypes.c_void_p
        kernel32.IsProcessInJob.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        handle = kernel32.OpenProcess(0x0400, False, proc.pid)  # PROCESS_QUERY_INFORMATION
        inside = ctypes.c_int(0)
        assert job is not None and kernel32.IsProcessInJob(handle, job.handle, ctypes.byref(inside))
        kernel32.CloseHandle(ctypes.c_void_p(handle))
        assert inside.value == 1
    finally:
        proc.kill()
        proc.wait()


@windows_only
def test_a_killed_pipeline_takes_its_tools_whole_tree_with_it(tmp_path: Path) -> None:
    beats = tmp_path / "beats"
    pipeline = subprocess.Popen([sys.executable, "-c", PIPELINE, str(beats), TREE], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not beats.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pipeline.kill()  # TerminateProcess: no handler of the pipeline's runs
    pipeline.wait()
    time.sleep(1.0)
    size = beats.stat().st_size
    time.sleep(1.0)
    assert beats.stat().st_size == size, "the tool's child still runs after the pipeline was killed"
