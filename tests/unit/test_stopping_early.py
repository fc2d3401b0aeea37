"""A command stopped as it starts (a CI job cancelled as its step begins): the signal is handled from the entry's
first lines, before the command line's imports (most of a second), so the command says so and exits 128 + the
signal, never with the signal's silent default (-15)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (Linux: SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signum - 1) & 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="skipped: reads the handlers from /proc")
def test_sigterm_while_the_command_line_is_imported_says_so_and_exits_143(tmp_path: Path) -> None:
    # Before: the handler came with the command (after the imports); a SIGTERM in the first ~0.7 s ended the
    # process with -15 and nothing said.
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipeline.py"), "plan", "--platform", "linux-64", "--cuda",
                             "cpu", "--py", "3.11"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not _handles(proc.pid, signal.SIGTERM) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)  # as soon as the process has a handler: its imports have barely begun
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err == "interrupted (SIGTERM) before the command started: nothing was run or changed\n"
    assert list(tmp_path.iterdir()) == []
