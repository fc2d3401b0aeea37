"""Windows job objects: the one way, without an external tool, to end a process tree on Windows (taskkill /T is not
everywhere: Wine 8.0's rejects it).

- The run's job: one per process, made at its first child, with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE. Its handle is
  never closed, so when this process ends, however it ends (TerminateProcess, a cancelled CI job, an out-of-memory
  kill), Windows closes it and ends every process in it: pip, uv, delvewheel, the py-rattler children, the smoke's
  check processes. Each child starts suspended (CREATE_SUSPENDED), is put in the job, and only then is resumed, so
  nothing it starts escapes (a process started before its assignment would).
- A build's job (build_runner.py): the build is also put, still suspended, in a job of its own inside the run's
  (nested jobs, Windows 8 and later), which ends its tree on a timeout or an interrupt.

A child that cannot be put in a job still runs (an older Windows that refuses nested jobs, a parent job that forbids
it): it is said once, and that child may outlive a killed run. One that cannot be resumed is ended, never left
suspended. The logic is here, tested on Linux with a fake kernel; the OS calls are Kernel32's methods alone.
"""

from __future__ import annotations

import ctypes
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

CREATE_SUSPENDED = 0x00000004
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001
PROCESS_SUSPEND_RESUME = 0x0800


class JobError(OSError):
    """A job could not be made, a process not put in it or not resumed."""


class Kernel(Protocol):
    """The OS calls this module makes (Kernel32 on Windows; a fake in the tests)."""

    def create_job(self) -> int:
        """A new job with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE; JobError."""
        ...

    def assign(self, job: int, pid: int) -> None:
        """Put process ``pid`` in ``job``; JobError."""
        ...

    def resume(self, pid: int) -> None:
        """Resume process ``pid``, started suspended; JobError."""
        ...

    def terminate(self, job: int, exit_code: int) -> bool:
        """End every process in ``job``; False where Windows refused."""
        ...

    def close(self, handle: int) -> None:
        ...


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", ctypes.c_uint64 * 6),  # IO_COUNTERS
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class Kernel32:
    """The Windows calls (ctypes). NtResumeProcess resumes every thread of a process from its handle alone:
    subprocess keeps the process handle, not the main thread's."""

    def __init__(self) -> None:
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
        kernel32.CreateJobObjectW.restype = ctypes.c_void_p
        kernel32.CreateJobObjectW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p]
        kernel32.SetInformationJobObject.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32]
        kernel32.OpenProcess.restype = ctypes.c_void_p
        kernel32.OpenProcess.argtypes = [ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32]
        kernel32.AssignProcessToJobObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        kernel32.TerminateJobObject.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        kernel32.CloseHandle.argtypes = [ctypes.c_void_p]
        ntdll = ctypes.WinDLL("ntdll")  # type: ignore[attr-defined,unused-ignore]
        ntdll.NtResumeProcess.argtypes = [ctypes.c_void_p]
        ntdll.NtResumeProcess.restype = ctypes.c_long
        self.kernel32, self.ntdll = kernel32, ntdll

    def _failed(self, what: str) -> JobError:
        code = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
        return JobError(code, f"{what} failed (Windows error {code})")

    def create_job(self) -> int:
        handle: int | None = self.kernel32.CreateJobObjectW(None, None)
        if not handle:
            raise self._failed("CreateJobObjectW")
        limits = _ExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if not self.kernel32.SetInformationJobObject(
            handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(limits), ctypes.sizeof(limits)
        ):
            error = self._failed("SetInformationJobObject")
            self.close(handle)
            raise error
        return handle

    def _process(self, pid: int, access: int) -> int:
        process: int | None = self.kernel32.OpenProcess(access, False, pid)
        if not process:
            raise self._failed(f"OpenProcess({pid})")
        return process

    def assign(self, job: int, pid: int) -> None:
        process = self._process(pid, PROCESS_SET_QUOTA | PROCESS_TERMINATE)
        try:
            if not self.kernel32.AssignProcessToJobObject(job, process):
                raise self._failed(f"AssignProcessToJobObject({pid})")
        finally:
            self.close(process)

    def resume(self, pid: int) -> None:
        process = self._process(pid, PROCESS_SUSPEND_RESUME)
        try:
            status = self.ntdll.NtResumeProcess(process)
            if status != 0:
                raise JobError(status, f"NtResumeProcess({pid}) failed (status {status & 0xFFFFFFFF:#010x})")
        finally:
            self.close(process)

    def terminate(self, job: int, exit_code: int) -> bool:
        return bool(self.kernel32.TerminateJobObject(job, exit_code))

    def close(self, handle: int) -> None:
        self.kernel32.CloseHandle(handle)


@dataclass(frozen=True)
class Job:
    """A job that ends its processes when closed."""

    handle: int
    kernel: Kernel

    @classmethod
    def new(cls, kernel: Kernel | None = None) -> Job:
        """A new, empty job; JobError where Windows refuses one."""
        kernel = kernel or Kernel32()
        return cls(kernel.create_job(), kernel)

    def add(self, pid: int) -> None:
        self.kernel.assign(self.handle, pid)

    def terminate(self, exit_code: int = 1) -> bool:
        """End every process in the job now; False where Windows refused."""
        return self.kernel.terminate(self.handle, exit_code)

    def close(self) -> None:
        """Close the handle (the processes still in the job end: KILL_ON_JOB_CLOSE)."""
        self.kernel.close(self.handle)


Start = Callable[[int], "subprocess.Popen[Any]"]  # Popen with these creation flags added


def started_in(start: Start, jobs: Sequence[Job], kernel: Kernel, said: Callable[[str], None]) -> subprocess.Popen[Any]:
    """A child started suspended, put in each of ``jobs`` in order, then resumed. A job that refuses it is
    ``said`` (the child runs outside it); a child that cannot be resumed is ended and JobError raised."""
    proc = start(CREATE_SUSPENDED)
    for job in jobs:
        try:
            job.add(proc.pid)
        except JobError as exc:
            said(f"process {proc.pid} ({_name(proc)}) runs outside a job, so it may outlive a killed run: "
                 f"{exc.strerror}")
    try:
        kernel.resume(proc.pid)
    except JobError:
        proc.kill()
        proc.wait()
        raise
    return proc


def _name(proc: subprocess.Popen[Any]) -> str:
    args = proc.args
    return str(args[0] if isinstance(args, list | tuple) and args else args)


class RunJob:
    """This process's job: every child in it (``start``), ended when the process ends."""

    def __init__(self, kernel: Callable[[], Kernel] = Kernel32) -> None:
        self._make_kernel = kernel
        self._lock = threading.Lock()
        self._job: Job | None = None
        self._refused = ""  # why there is no job, once it was tried
        self.said: list[str] = []  # what was said (once each kind)

    def job(self) -> Job | None:
        with self._lock:
            if self._job is None and not self._refused:
                try:
                    self._job = Job.new(self._make_kernel())
                except JobError as exc:
                    self._refused = str(exc)
                    self._say(f"no job object for this run's processes, so they may outlive a killed run: "
                              f"{exc.strerror}")
            return self._job

    def start(self, start: Start, also: Sequence[Job] = ()) -> subprocess.Popen[Any]:
        """A child in the run's job (and then in ``also``), resumed only once it is in them."""
        job = self.job()
        if job is None:
            return start(0) if not also else started_in(start, also, also[0].kernel, self._say)
        return started_in(start, [job, *also], job.kernel, self._say)

    def _say(self, line: str) -> None:
        first = not self.said
        self.said.append(line)
        if first:
            from torchbuild.host.console import console

            console.print(f"[yellow]warning:[/] {line}", markup=True, highlight=False)


RUN = RunJob()


def started_in_run_job(start: Start, also: Sequence[Job] = ()) -> subprocess.Popen[Any]:
    """``start`` (Popen with the creation flags given added) as a child in this process's job (Windows)."""
    return RUN.start(start, also)
