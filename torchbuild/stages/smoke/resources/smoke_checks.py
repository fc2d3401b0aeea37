"""Smoke checks that run INSIDE a fresh environment (a venv with the wheel, a prefix with the conda package).

This file and its siblings (smoke_base.py: what the checks share; checks_core.py, checks_more.py,
checks_consumer.py, checks_install.py and checks_cuda.py: torch's checks; checks_vision.py and checks_audio.py: the
companions') are copied into the environment and run by that environment's Python from an empty working directory,
through run_checks.py (which loads this folder as a package: the siblings import each other relatively, one way in
the fresh environments and in torchbuild alike).
They import only the standard library at module level: torch, numpy and the companions are imported inside the
checks, in child processes (PROCESSES: the checks that can share one run in one, in order). A child that crashes (a
segfault, "OMP: Error #15" aborting the process) or ends without every result is not trusted: each of its checks runs
again in a process of its own, so a crash fails its one check and leaves the others to run.

    python run_checks.py --expect-version 2.13.0+cpu --expect-cuda cpu [--expect-cudnn 9] \
        [--expect-torch-file PATH] [--expect-torchvision 0.20.1] [--expect-torchaudio 2.5.1] \
        [--expect-companion NAME=VERSION ...] [--expect-broken-scripts torchfrtrace,...] [--only NAME ...]

prints one JSON object per line on stdout, one per check:
    {"check": "import", "status": "passed" | "failed" | "skipped" | "not run", "message": "...", "output": "..."}
and exits 1 when a check failed. "not run" is this harness's failure, never the artifact's: the check's process
could not be started (an OSError from the OS: "[WinError 1359] Internal error" under a loaded Wine, EAGAIN, EMFILE),
twice (smoke_base.started_twice), or the harness itself failed before the check ran; the message says which, with
the error. A process that started on its second try says so in its checks' messages. No torchbuild imports: the
environment has only torch, numpy and their dependencies.
"""

from __future__ import annotations

import argparse
import codecs
import concurrent.futures
import json
import locale
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence

from . import (
    checks_audio,
    checks_beside,
    checks_consumer,
    checks_core,
    checks_cuda,
    checks_install,
    checks_more,
    checks_vision,
)
from .smoke_base import (
    CHECK_TIMEOUT_S,
    FIRST_DONE_ENV,
    START_RETRY_S,
    CheckFailed,
    Expect,
    NotStarted,
    Outcome,
    clean_env,
    gpu_present,
    started_twice,
    tail,
)

__all__ = [
    "CHECKS", "CHECK_TIMEOUT_S", "COMPANION_CHECKS", "DATALOADER_SCRIPT", "PROCESSES", "check_names", "clean_env",
    "gpu_present", "main",
]  # fmt: skip

CHILD_FLAG = "--child"
STARTED = "started"  # the harness's first line, {"harness": "started"}: the environment's python runs it
ENTRY = "run_checks.py"  # the script a process runs these checks with (this folder as a package)
JOBS = 2
CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    **checks_core.CHECKS, **checks_more.CHECKS, **checks_consumer.CHECKS, **checks_install.CHECKS,
    **checks_cuda.CHECKS, **checks_vision.CHECKS, **checks_audio.CHECKS, **checks_beside.CHECKS,
}  # fmt: skip
# A companion's checks, run only where it is installed beside torch (``--expect-<name>``).
COMPANION_CHECKS: dict[str, tuple[str, ...]] = {
    "torchvision": tuple(checks_vision.CHECKS),
    "torchaudio": tuple(checks_audio.CHECKS),
}
# The checks that share a child process, in the order they run there (checks_core.py and checks_more.py say why);
# every check is in exactly one. As upstream's smoke test does, every check that needs no process of its own shares
# the first (torch imported once: under Wine an import of torch is 4-6 CPU seconds): the core's, the cheap checks of
# checks_more.py, the companions' (torchvision's, torchaudio's, the import of any other: where they are installed),
# and the console scripts last (their imports, caffe2's among them, may leave the process unlike a user's). A process
# of its own only where isolation is what is checked or needed: numpy imported before torch (two OpenMP runtimes),
# then the DataLoader (its script starts its own process and two spawned workers); the CUDA runtime check, after whose
# device-side assert nothing can use the GPU in that process. torch.compile's and the C++ consumer's (with the
# dist-info check, which imports nothing) run beside the rest: they are the longest, and hash files before they
# import torch (HASH_FIRST). A shared process that crashes or ends without a result for each of its checks is not
# trusted: each of its checks runs again alone, so a crash is named by the check that crashed (_run_shared).
PROCESSES: tuple[tuple[str, ...], ...] = (
    (*checks_core.PROCESSES[0], *checks_more.WITH_IMPORT, *checks_vision.CHECKS, *checks_audio.CHECKS,
     *checks_beside.CHECKS, "console scripts"),
    ("torch.compile",),
    ("dist-info", "c++ consumer"),
    checks_core.PROCESSES[1],
    ("cuda runtime",),
)  # fmt: skip
DATALOADER_SCRIPT: str = checks_core.DATALOADER_SCRIPT
# A check that failed with a UnicodeError where this environment's locale encoding is not UTF-8 runs once more in
# Python's UTF-8 mode; passing there, it passed, and says so with LOCALE_RETRIED (the host's setting, not the
# artifact: torch's inductor reads its UTF-8 templates with the locale's encoding, which a C locale makes ASCII).
UTF8_MODE = {"PYTHONUTF8": "1"}
LOCALE_RETRIED = "passed in Python's UTF-8 mode (PYTHONUTF8=1)"
# Checks whose process reads and hashes files before it imports torch, if it does at all (torch.compile's content
# key, the C++ consumer's): they need not wait for torch's bytecode.
HASH_FIRST = frozenset({"torch.compile", "c++ consumer"})


# --- running ---------------------------------------------------------------------------------------------


def check_names(companions: Sequence[str] = ()) -> list[str]:
    """The checks that run in an environment with ``companions`` installed beside torch: torch's and theirs (those
    without checks of their own: the companion import check, checks_beside.py)."""
    left_out = {n for name, checks in COMPANION_CHECKS.items() if name not in companions for n in checks}
    if all(name in COMPANION_CHECKS for name in companions):
        left_out.add(checks_beside.NAME)
    return [name for name in CHECKS if name not in left_out]


def _not_started(name: str, error: NotStarted) -> dict[str, str]:
    message = f"not run: its process could not be started (tried twice: {error}); the smoke harness's failure"
    return {"check": name, "status": "not run", "message": message, "output": ""}


def _child(
    names: Sequence[str], expect: Expect, extra: Mapping[str, str]
) -> tuple[subprocess.CompletedProcess[str] | None, str]:
    """The checks ``names`` run one after another in one child process (``extra`` added to its environment): the
    process (None when it timed out), and what went wrong starting it the first time, if it did (said in its
    checks' messages). NotStarted when it could not be started twice (smoke_base.started_twice)."""
    argv = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), ENTRY), *_expect_args(expect)]
    argv += [arg for name in names for arg in (CHILD_FLAG, name)]
    env = {**clean_env(), **extra}

    def run() -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                timeout=CHECK_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None

    def said(error: str) -> None:
        print(f"smoke_checks: the process of {', '.join(names)} could not be started ({error}); trying once more in "
              f"{START_RETRY_S:.0f} s", file=sys.stderr, flush=True)  # fmt: skip

    proc, first = started_twice(run, said)
    return proc, f"its process could not be started at first ({first}) and started on the retry" if first else ""


def _said(result: dict[str, str], retried: str) -> dict[str, str]:
    return {**result, "message": f"{result.get('message')} ({retried})"} if retried else result


def _run_shared(names: Sequence[str], expect: Expect, extra: Mapping[str, str]) -> list[dict[str, str]]:
    """The checks of one of PROCESSES in one child; if it does not end cleanly with a result for each, each runs
    again alone (_run_child), so that a crash is reported by the check that crashed. A process that cannot be
    started makes its checks "not run"."""
    if len(names) == 1:
        return [_run_child(names[0], expect, extra)]
    try:
        proc, retried = _child(names, expect, extra)
    except NotStarted as exc:
        return [_not_started(name, exc) for name in names]
    if proc is None:
        return [_run_child(name, expect, extra) for name in names]
    results: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("check") in names:
            results[result["check"]] = {**result, "output": tail(proc.stderr)}
    if proc.returncode != 0 or len(results) != len(names):
        return [_run_child(name, expect, extra) for name in names]
    return [_said(results[name], retried) for name in names]


def _run_child(name: str, expect: Expect, extra: Mapping[str, str]) -> dict[str, str]:
    """Run one check in a child process; a crash or a missing result is that check's failure; a process that
    cannot be started, its "not run"."""
    try:
        proc, retried = _child([name], expect, extra)
    except NotStarted as exc:
        return _not_started(name, exc)
    if proc is None:
        return {"check": name, "status": "failed", "message": f"timed out after {CHECK_TIMEOUT_S:.0f} s", "output": ""}
    output = tail(proc.stderr)
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        result = json.loads(last[0])
    except ValueError:
        result = None
    if not isinstance(result, dict) or result.get("check") != name:
        how = f"died with signal {-proc.returncode}" if proc.returncode < 0 else f"exited {proc.returncode}"
        return _said({
            "check": name,
            "status": "failed",
            "message": f"the check process {how} without a result",
            "output": tail(proc.stdout + "\n" + proc.stderr),
        }, retried)  # fmt: skip
    if proc.returncode != 0 and result.get("status") != "failed":
        result = {
            **result,
            "status": "failed",
            "message": f"{result.get('message')}; then the process exited {proc.returncode}",
        }
    return _said({**result, "output": output}, retried)


def locale_encoding() -> str | None:
    """This environment's text encoding where it is not UTF-8 (a C locale's ASCII, a Windows code page), else None."""
    if sys.flags.utf8_mode:
        return None
    encoding = locale.getpreferredencoding(False)
    try:
        return None if codecs.lookup(encoding).name == "utf-8" else encoding
    except LookupError:
        return encoding


def _in_utf8_mode(result: dict[str, str], expect: Expect) -> dict[str, str]:
    """``result`` where it is no failure of the locale (LOCALE_RETRIED); else the check run again in UTF-8 mode: its
    pass, saying why, or the first failure with what the second said."""
    encoding = locale_encoding()
    said = f"{result.get('message', '')}\n{result.get('output', '')}"
    unicode_error = "UnicodeDecodeError" in said or "UnicodeEncodeError" in said
    if encoding is None or result.get("status") != "failed" or not unicode_error:
        return result
    first = (str(result.get("message", "")).strip().splitlines() or ["a UnicodeError"])[0]
    again = _run_child(result["check"], expect, UTF8_MODE)
    if again.get("status") != "passed":
        also = f"; in UTF-8 mode (PYTHONUTF8=1) too: {again.get('message')}"
        return {**result, "message": f"{result.get('message')}{also}"}
    why = (f"{LOCALE_RETRIED}: with this host's locale encoding ({encoding}) it failed, {first}. The host's setting, "
           "not the artifact: a user on such a host needs a UTF-8 locale (e.g. LANG=C.UTF-8) or PYTHONUTF8=1")
    return {**again, "message": f"{why}; {again.get('message', '')}".rstrip("; ")}


def _expect_args(expect: Expect) -> list[str]:
    args = ["--expect-version", expect.version, "--expect-cuda", expect.cuda]
    if expect.cudnn is not None:
        args += ["--expect-cudnn", str(expect.cudnn)]
    if expect.torch_file:
        args += ["--expect-torch-file", expect.torch_file]
    if expect.cudnn_version:
        args += ["--expect-cudnn-version", expect.cudnn_version]
    if expect.from_environment:
        args += ["--expect-from-environment", ",".join(expect.from_environment)]
    if expect.torchvision:
        args += ["--expect-torchvision", expect.torchvision]
    if expect.torchaudio:
        args += ["--expect-torchaudio", expect.torchaudio]
    if expect.broken_scripts:
        args += ["--expect-broken-scripts", ",".join(expect.broken_scripts)]
    for name, version in expect.companions:
        args += ["--expect-companion", f"{name}={version}"]
    return args


def run_one(name: str, expect: Expect) -> dict[str, str]:
    """Run one check in this process (the child side), timed."""
    started = time.monotonic()
    try:
        outcome = CHECKS[name](expect)
    except CheckFailed as exc:
        outcome = Outcome("failed", str(exc))
    except Exception as exc:
        traceback.print_exc()
        outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
    seconds = f"{time.monotonic() - started:.3f}"
    return {"check": name, "status": outcome.status, "message": outcome.message, "seconds": seconds}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Smoke checks of an installed torch (run inside the environment).")
    parser.add_argument("--expect-version", required=True)
    parser.add_argument("--expect-cuda", required=True, help='"cpu" or the CUDA version X.Y')
    parser.add_argument("--expect-cudnn", type=int, default=None)
    parser.add_argument("--expect-torch-file", default=None)
    parser.add_argument("--expect-cudnn-version", default=None, help="X.Y.Z: the cuDNN the wheel's requirement pins")
    parser.add_argument("--expect-from-environment", default="", help="library file names, comma-separated")
    parser.add_argument("--expect-torchvision", default=None, help="torchvision's release, installed beside torch")
    parser.add_argument("--expect-torchaudio", default=None, help="torchaudio's release, installed beside torch")
    parser.add_argument("--expect-broken-scripts", default="", help="scripts upstream ships broken, comma-separated")
    parser.add_argument("--expect-companion", action="append", default=[], metavar="NAME=VERSION",
                        help="a package beside torch without checks of its own, and its version")  # fmt: skip
    parser.add_argument("--only", action="append", choices=list(CHECKS), default=None)
    parser.add_argument("--jobs", type=int, default=JOBS, help="checks run at the same time (default %(default)s)")
    parser.add_argument(CHILD_FLAG, action="append", choices=list(CHECKS), default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    expect = Expect(
        args.expect_version, args.expect_cuda, args.expect_cudnn, args.expect_torch_file, args.expect_cudnn_version,
        tuple(name for name in args.expect_from_environment.split(",") if name), args.expect_torchaudio,
        args.expect_torchvision, tuple(name for name in args.expect_broken_scripts.split(",") if name),
        tuple((name, version) for name, _, version in (text.partition("=") for text in args.expect_companion)),
    )
    if args.child:
        for name in args.child:
            print(json.dumps(run_one(name, expect)), flush=True)
        return 0
    print(json.dumps({"harness": STARTED}), flush=True)  # the environment's python started this harness
    releases = {"torchvision": expect.torchvision, "torchaudio": expect.torchaudio}
    installed = [name for name, release in releases.items() if release] + [name for name, _ in expect.companions]
    wanted = args.only or check_names(installed)
    processes = [shared for shared in (tuple(n for n in group if n in wanted) for group in PROCESSES) if shared]
    # The child processes are independent of each other: two at a time on two cores. Those that import torch wait for
    # the first (its import of torch writes torch's bytecode, which a fresh environment lacks, once for the others:
    # 3-4 s less CPU than each compiling it at once); those that hash files before anything else (HASH_FIRST) start
    # beside it. The results are printed in the checks' order.
    early = [group for group in processes[1:] if HASH_FIRST & set(group)]
    later = [group for group in processes[1:] if group not in early]
    with tempfile.TemporaryDirectory(prefix="smoke-first-") as tmp:
        marker = os.path.join(tmp, "done")
        beside_first = {FIRST_DONE_ENV: marker}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            started = [(processes[0], pool.submit(_run_shared, processes[0], expect, {}))] if processes else []
            started += [(group, pool.submit(_run_shared, group, expect, beside_first)) for group in early]
            try:
                if started:
                    started[0][1].exception()  # waits for it; an error is reported below, with its checks
            finally:
                open(marker, "w", encoding="utf-8").close()
            started += [(group, pool.submit(_run_shared, group, expect, {})) for group in later]
            ran = [_harness_results(group, future) for group, future in started]
    found = {r["check"]: r for rs in ran for r in rs}
    results = [_in_utf8_mode(found[name], expect) for name in wanted]
    for result in results:
        print(json.dumps(result), flush=True)
    return 1 if any(result["status"] == "failed" for result in results) else 0


def _harness_results(
    group: Sequence[str], future: concurrent.futures.Future[list[dict[str, str]]]
) -> list[dict[str, str]]:
    """The results of one process's checks; where this harness failed running them (an error here, not in the check's
    process), each is "not run" with the error (on stderr with its traceback)."""
    try:
        return future.result()
    except Exception as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        message = f"not run: the smoke harness failed before this check ran ({type(exc).__name__}: {exc})"
        return [{"check": name, "status": "not run", "message": message, "output": ""} for name in group]
