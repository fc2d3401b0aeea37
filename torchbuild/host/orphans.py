"""Children that end with this process, however it ends (a kill -9 included, which no handler sees), and with them
everything they start: the one way torchbuild starts a process (``start``; host/signals.py's ``run`` and ``start``
call it, and register the child so that a stopped run ends it).

- Linux: each child is started through a small launcher (``python -I -S -c``) in a session and process group of its
  own. The launcher asks the kernel for SIGUSR1 when its parent dies (prctl PR_SET_PDEATHSIG), checks that the
  parent is still the one that started it (it may have died before the prctl), forks the tool and waits for it,
  exiting as the tool did. On SIGUSR1 (its parent died, or ``end`` asks) it runs its ``on_death`` command, if it has
  one, then kills its whole process group: the tool and whatever the tool started (the smoke's check processes and
  their DataLoader workers, a build's compilers) that did not leave the group. A process that leaves the group (a
  daemon: Wine's wineserver) is ended by the ``on_death`` command of a ``watcher`` (platforms/windows/wine.py's
  sessions: ``wineserver -k`` of their prefix). Process groups rather than a subreaper: a subreaper only inherits
  orphans, and the pipeline killed with -9 cannot wait for them.
- Windows: the child starts suspended, is put in the run's job object (win_jobs.py: one per process, kill-on-close)
  and only then resumed; it and everything it starts end when this process ends, however it ends.
- Elsewhere: as it is.

The kernel's parent-death signal follows the thread that started the launcher: every caller starts and waits for its
child in one thread (a stage's), which outlives the child.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.host import win_jobs

PR_SET_PDEATHSIG = 1
NOT_FOUND = 127  # the launcher's exit status when the tool cannot be executed (a shell's)
ON_DEATH_TIMEOUT_S = 60  # the most an on_death command may take (wineserver -k of a busy prefix: seconds)
LINUX = sys.platform.startswith("linux")
# The launcher. A SIGTERM to it is for the tool (ignored here); SIGUSR1 (from the kernel when this process dies, or
# from ``end``) runs the on_death command and kills the whole group. Without a tool it is a watcher: it waits for
# SIGUSR1, or for SIGTERM (``release``: the caller ended what it watches itself), and exits.
_LAUNCHER = f"""
import ctypes, os, signal, sys
parent, count = int(sys.argv[1]), int(sys.argv[2])
on_death, argv = sys.argv[3:3 + count], sys.argv[3 + count:]
def end(signum, frame):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if on_death:
        import subprocess
        try:
            subprocess.run(on_death, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout={ON_DEATH_TIMEOUT_S})
        except Exception:
            pass
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGUSR1, end)
ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGUSR1)
if os.getppid() != parent:
    end(0, None)
if not argv:
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    os.write(1, b"ready\\n")
    while True:
        signal.pause()
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"{{argv[0]}}: {{exc.strerror}}\\n")
        os._exit({NOT_FOUND})
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
if code < 0:  # ended by a signal: the same one ends the launcher (SIGKILL's action cannot be set, nor need be)
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
os._exit(code)
"""


def start(
    argv: Sequence[str | os.PathLike[str]],
    *,
    on_death: Sequence[str] = (),
    windows_job: win_jobs.Job | None = None,
    **options: Any,
) -> subprocess.Popen[Any]:
    """``subprocess.Popen(argv, **options)``, the child ending with this process with everything it starts.
    ``on_death``: a command the launcher runs first when it ends the child's group (Linux). ``windows_job``: a job
    the child is also put in before it runs, inside the run's (Windows; a build's). FileNotFoundError, as Popen
    raises it, when the program is not found."""
    args = [os.fspath(a) for a in argv]
    if LINUX and args:
        _find(args[0], options.get("env"), options.get("cwd"))
        command = [*_launcher(on_death), *args]
        return subprocess.Popen(command, start_new_session=True, **options)
    if os.name == "nt":
        flags = options.pop("creationflags", 0)
        also = [windows_job] if windows_job is not None else []
        return win_jobs.started_in_run_job(lambda more: subprocess.Popen(args, creationflags=flags | more, **options),
                                           also)  # fmt: skip
    return subprocess.Popen(args, **options)


def watcher(on_death: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[Any] | None:
    """A process that runs ``on_death`` (with ``env``) when this process dies, however it dies, or when ``end``
    is called on it; ``release`` it once what it watches has ended. It is ready when this returns. None where there
    is no launcher (not Linux: a job object ends Windows' processes; Wine runs on Linux only)."""
    if not LINUX:
        return None
    proc = subprocess.Popen(_launcher(on_death), env=None if env is None else dict(env), start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    assert proc.stdout is not None
    with proc.stdout:  # "ready": its handlers are set, so that ``end`` and ``release`` do what they say
        proc.stdout.readline()
    return proc


def _launcher(on_death: Sequence[str]) -> list[str]:
    """The launcher's command line, before the tool's: this process's id, then the on_death command, counted."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), str(len(on_death)), *on_death]


def end(proc: subprocess.Popen[Any]) -> None:
    """End ``proc`` and what it started now, as if this process had died (its on_death command runs). Windows: the
    child itself (what it started ends with the run's job)."""
    if proc.poll() is not None:
        return
    try:
        if LINUX:
            os.kill(proc.pid, signal.SIGUSR1)
        else:
            proc.kill()
    except OSError:
        pass


def release(proc: subprocess.Popen[Any]) -> None:
    """Let a ``watcher`` go without running its command (what it watched ended as it should)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(ON_DEATH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()


def _find(program: str, env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None) -> None:
    """FileNotFoundError where ``program`` is not there to run (the launcher itself always is)."""
    if os.sep in program:
        found = (Path(cwd or ".") / program).is_file()
    else:
        found = shutil.which(program, path=(env if env is not None else os.environ).get("PATH")) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
