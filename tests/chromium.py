"""Debian's chromium, headless, on a page the pipeline wrote: what the report and history tests look at."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n"


def browse(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Debian's chromium, headless, on ``page``, with a fresh profile; skipped with the reason where there is none."""
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("skipped: chromium is not installed (apt-get install -y chromium; .ci/run installs it as root)")
    argv = [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", *flags, page.as_uri()]
    return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=180, check=False)


def console_errors(stderr: str) -> list[str]:
    """What the page's scripts said went wrong, as chromium logs it (``CONSOLE(n)] "Uncaught ..."``)."""
    return [line for line in stderr.splitlines() if "Uncaught" in line or ":CONSOLE(" in line]


def shown(page: Path, screenshot: Path, scratch: Path, size: str) -> str:
    """``page`` drawn into ``screenshot`` (kept after the test, to look at) with no console error; its DOM."""
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    shot = browse(page, scratch / "profile", "--enable-logging=stderr", "--v=0", f"--screenshot={screenshot}",
                  f"--window-size={size}")  # fmt: skip
    assert shot.returncode == 0, shot.stderr[-2000:]
    print(f"screenshot: {screenshot}")
    assert screenshot.read_bytes()[:8] == PNG and screenshot.stat().st_size > 10_000
    assert console_errors(shot.stderr) == []
    return browse(page, scratch / "profile-dom", "--dump-dom").stdout
