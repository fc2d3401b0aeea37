"""Children that end with this process, however it ends (a kill -9 included, which no handler sees).

On Linux each child is started through a small launcher (``python -I -S -c``) that asks the kernel for SIGKILL
when its parent dies (prctl PR_SET_PDEATHSIG, kept across exec), checks that the parent is still the one that
started it (it may have died before the prctl), then execs the tool itself, under the same process id. Elsewhere
the argv is left as it is (Windows ends a child with its job object only; the tools then outlive a killed
pipeline, as before; the build's tree is in a job of its own, host/win_jobs.py).

The kernel's signal reaches the tool only, not what the tool started. For a tool that leads a process group of its
own (the build: ninja's compilers), ``with_group`` keeps the launcher as the group's leader and the tool's parent:
when this process dies it kills the whole group.

The launcher's parent is the thread that started it; every caller waits for its child in that thread.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
NOT_FOUND = 127  # the launcher's exit status when the tool cannot be executed (a shell's)
_LAUNCHER = f"""
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL)
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"{{sys.argv[2]}}: {{exc.strerror}}\\n")
    os._exit({NOT_FOUND})
"""
# The launcher of a process group (started with start_new_session): it stays, as the group's leader, waits for the
# tool and exits as it did. A SIGTERM to the group is for the tool (the launcher ignores it); this process's death
# (SIGUSR1, from the kernel) kills the whole group.
_GROUP_LAUNCHER = f"""
import ctypes, os, signal, sys
def kill_group(signum, frame):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, kill_group)
ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGUSR1)
if os.getppid() != int(sys.argv[1]):
    kill_group(0, None)
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as exc:
        sys.stderr.write(f"{{sys.argv[2]}}: {{exc.strerror}}\\n")
        os._exit({NOT_FOUND})
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code < 0:  # ended by a signal: the same one ends the launcher (SIGKILL's action cannot be set, nor need be)
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""


def with_parent(
    argv: Sequence[str | os.PathLike[str]],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> list[str]:
    """``argv`` started so that it dies with this process (Linux). FileNotFoundError, as Popen raises it, when the
    program is not found (the launcher itself always is)."""
    return _launched(_LAUNCHER, argv, env, cwd)


def with_group(
    argv: Sequence[str | os.PathLike[str]],
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> list[str]:
    """``argv`` started (with ``start_new_session``) so that its whole process group dies with this process
    (Linux); its children included. FileNotFoundError as ``with_parent``."""
    return _launched(_GROUP_LAUNCHER, argv, env, cwd)


def _launched(
    launcher: str,
    argv: Sequence[str | os.PathLike[str]],
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
) -> list[str]:
    args = [os.fspath(a) for a in argv]
    if not sys.platform.startswith("linux") or not args:
        return args
    program = args[0]
    if os.sep in program:
        found = (Path(cwd or ".") / program).is_file()
    else:
        found = shutil.which(program, path=(env if env is not None else os.environ).get("PATH")) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return [sys.executable, "-I", "-S", "-c", launcher, str(os.getpid()), *args]
