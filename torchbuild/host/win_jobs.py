"""A Windows Job Object around a child process and everything it starts: the one way, without an external tool, to
stop a process tree on Windows (taskkill /T is not everywhere: Wine 8.0's rejects it).

The child is assigned to the job right after it starts (subprocess cannot start it suspended); the processes it
starts from then on are in the job too. The job is made with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, so when its last
handle closes, this process's exit included (a kill too), every process in it ends.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
PROCESS_SET_QUOTA = 0x0100
PROCESS_TERMINATE = 0x0001


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


class JobError(OSError):
    """The job could not be made or the process not put in it (the caller falls back to taskkill)."""


def _kernel32() -> Any:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined,unused-ignore]
    kernel32.CreateJobObjectW.restype = ctypes.c_void_p
    kernel32.CreateJobObjectW.argtypes = [ctypes.c_void_p, ctypes.c_wchar_p]
    kernel32.SetInformationJobObject.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32]
    kernel32.OpenProcess.restype = ctypes.c_void_p
    kernel32.OpenProcess.argtypes = [ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32]
    kernel32.AssignProcessToJobObject.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    kernel32.TerminateJobObject.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    kernel32.CloseHandle.argtypes = [ctypes.c_void_p]
    return kernel32


def _failed(what: str) -> JobError:
    code = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
    return JobError(code, f"{what} failed (Windows error {code})")


@dataclass(frozen=True)
class Job:
    """A job that ends its processes when closed. Only on Windows."""

    handle: int

    @classmethod
    def around(cls, pid: int) -> Job:
        """A new job holding process ``pid`` (and what it starts from now on). JobError where that fails."""
        kernel32 = _kernel32()
        handle = kernel32.CreateJobObjectW(None, None)
        if not handle:
            raise _failed("CreateJobObjectW")
        job = cls(handle)
        try:
            limits = _ExtendedLimits()
            limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
            if not kernel32.SetInformationJobObject(
                handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS, ctypes.byref(limits), ctypes.sizeof(limits)
            ):
                raise _failed("SetInformationJobObject")
            process = kernel32.OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, False, pid)
            if not process:
                raise _failed(f"OpenProcess({pid})")
            try:
                if not kernel32.AssignProcessToJobObject(handle, process):
                    raise _failed(f"AssignProcessToJobObject({pid})")
            finally:
                kernel32.CloseHandle(process)
        except JobError:
            job.close()
            raise
        return job

    def terminate(self, exit_code: int = 1) -> bool:
        """End every process in the job now; False where Windows refused."""
        return bool(_kernel32().TerminateJobObject(self.handle, exit_code))

    def close(self) -> None:
        """Close the handle (the processes still in the job end: KILL_ON_JOB_CLOSE)."""
        _kernel32().CloseHandle(self.handle)
