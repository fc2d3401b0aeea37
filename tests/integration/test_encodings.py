"""The main job and every command as Windows and minimal containers run them, not with the UTF-8 this host gives.

On Windows, Python writes a piped stdout (every CI log, `> log.txt`) in the ANSI code page (cp1252; cp936 on a Chinese
machine) and a console in the OEM one (cp437); a container without a UTF-8 locale (LC_ALL=C, PYTHONUTF8=0,
PYTHONCOERCECLOCALE=0) makes stdout, the default file encoding and every child's ASCII. Each run here has its output
piped, as a CI log is (no terminal, no COLUMNS), and read back strictly in that encoding. Two runs are fresh (every
stage runs: a CI log's cp1252, and the C locale, where torch.compile reads its templates as ASCII); the other
encodings rerun the first's cells and run each command on what it made.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import REPODATA, ROOT, Scratch

pytestmark = pytest.mark.slow

CELL = "linux-64-cpu-py3.11"
CELL_ARGS = ("--cuda", "cpu", "--py", "3.11")
# the host's settings for each: what its stdout is written in, and what the test decodes it with
HOSTS = {
    "utf-8": ({}, "utf-8"),
    "cp1252": ({"PYTHONIOENCODING": "cp1252"}, "cp1252"),  # Windows: a piped stdout, a CI log
    "cp437": ({"PYTHONIOENCODING": "cp437"}, "cp437"),  # Windows: an English console's OEM code page
    "cp936": ({"PYTHONIOENCODING": "cp936"}, "cp936"),  # Windows: a Chinese machine's, as the seeds' users have
    "ascii": ({"PYTHONIOENCODING": "ascii"}, "ascii"),
    "C locale": ({"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, "ascii"),  # a minimal container
}
NOT_UTF8 = [name for name in HOSTS if name != "utf-8"]
# what a terminal or this host would add, and a Windows CI log has not
LEFT_OUT = ("COLUMNS", "LINES", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONCOERCECLOCALE", "LC_ALL", "LC_CTYPE")
ESCAPED = re.compile(r"\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}")


@dataclass(frozen=True)
class Said:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def torchbuild(host: str, cwd: Path, *args: str) -> Said:
    """``python pipeline.py ARGS`` with ``host``'s settings, its output piped and read back strictly in the encoding
    that host writes (a byte it could not have written fails here)."""
    settings, encoding = HOSTS[host]
    env = {k: v for k, v in os.environ.items() if k not in LEFT_OUT}
    proc = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *args], cwd=cwd, capture_output=True,
                          env={**env, **settings}, check=False)  # fmt: skip
    return Said(proc.returncode, proc.stdout.decode(encoding), proc.stderr.decode(encoding))


def assert_said_cleanly(said: Said) -> None:
    """No traceback, and no character written as its escape (``\\u2713`` for a check mark)."""
    assert "Traceback" not in said.text, said.text[-3000:]
    assert not ESCAPED.search(said.text), ESCAPED.findall(said.text)


def main_job(host: str, workspace: Path) -> Said:
    return torchbuild(host, workspace, *CELL_ARGS, "--matrix", str(ROOT / "matrix.yaml"), "--repodata", str(REPODATA))


@pytest.fixture(scope="module")
def windows_log(module_scratch: Scratch) -> tuple[Path, Said]:
    """A fresh main job as a Windows CI job logs it: stdout piped in cp1252."""
    workspace = module_scratch("cp1252")
    return workspace, main_job("cp1252", workspace)


@pytest.fixture(scope="module")
def c_locale(module_scratch: Scratch) -> tuple[Path, Said]:
    """A fresh main job in a C locale without UTF-8 mode: stdout, files' default encoding and the children's ASCII."""
    workspace = module_scratch("c-locale")
    return workspace, main_job("C locale", workspace)


# The main job in a C locale (80 s) is the nightly's: CI's time carries the Windows log's; the harness's UTF-8-mode
# retry, in CI: tests/unit/test_smoke_checks.py (a check that fails for the locale).
@pytest.mark.parametrize("fixture", ["windows_log", pytest.param("c_locale", marks=pytest.mark.nightly)])
def test_a_fresh_main_job_passes_and_prints_every_line(fixture: str, request: pytest.FixtureRequest) -> None:
    workspace, said = request.getfixturevalue(fixture)
    assert said.returncode == 0, said.text[-4000:]  # as under UTF-8 (tests/integration/test_pipeline.py)
    assert_said_cleanly(said)
    assert "> source ..." in said.stderr and "+ source      passed" in said.stderr  # the stand-ins of ▶ and ✓
    # the summary as a CI log shows it: every cell id and version whole, not cut at 80 columns
    assert re.search(rf"\| {CELL} +\| 2\.13\.0\+cpu +\| \+ \d+s", said.stdout), said.stdout
    assert "all cells passed" in said.stdout
    assert f"conda install -c {(workspace / 'channel').as_uri()} pytorch" in said.stdout
    report = json.loads((workspace / "build" / "report.json").read_text(encoding="utf-8"))
    assert [s["status"] for s in report["cells"][0]["stages"]] == [
        "passed", "skipped", "passed", "passed", "passed", "passed", "passed", "passed",
    ]  # fmt: skip
    # the files are UTF-8 whatever the host's encoding
    assert "✅ passed" in (workspace / "build" / "report.md").read_text(encoding="utf-8")


@pytest.mark.nightly
def test_a_check_that_fails_for_the_locale_passes_in_utf8_mode_and_says_why(c_locale: tuple[Path, Said]) -> None:
    """torch's inductor reads its UTF-8 templates with the locale's encoding: in a C locale torch.compile fails
    there for every user, whatever the artifact. The check runs again in UTF-8 mode, passes, and names the cause."""
    workspace, said = c_locale
    report = json.loads((workspace / "build" / "report.json").read_text(encoding="utf-8"))
    checks = {c["name"]: c for s in report["cells"][0]["stages"] for c in s["checks"]}
    compiled = checks["wheel: torch.compile"]
    assert compiled["status"] == "passed"
    assert compiled["message"].startswith(
        "passed in Python's UTF-8 mode (PYTHONUTF8=1): with this host's locale encoding (ANSI_X3.4-1968) it failed, "
        "UnicodeDecodeError: 'ascii' codec can't decode byte"
    )
    assert "a user on such a host needs a UTF-8 locale (e.g. LANG=C.UTF-8) or PYTHONUTF8=1" in compiled["message"]
    assert "wheel: torch.compile: passed in Python's UTF-8 mode (PYTHONUTF8=1), not with this host's locale" in (
        said.stderr
    )
    # every other check passed as the host is
    others = [c for name, c in checks.items() if "torch.compile" not in name and c["status"] == "passed"]
    assert others and not any("UTF-8 mode" in c["message"] for c in others)


@pytest.mark.parametrize("host", ["cp437", "cp936", "ascii"])
def test_a_rerun_prints_every_line_in_the_consoles_code_page(host: str, windows_log: tuple[Path, Said]) -> None:
    workspace, first = windows_log
    assert first.returncode == 0
    said = main_job(host, workspace)
    assert said.returncode == 0, said.text[-4000:]
    assert_said_cleanly(said)
    assert "= source      cached" in said.stderr  # the stand-in of ↺
    assert re.search(rf"\| {CELL} +\| 2\.13\.0\+cpu +\| = \d+s", said.stdout), said.stdout


def test_the_smoke_command_prints_every_line_in_a_chinese_consoles_code_page(windows_log: tuple[Path, Said]) -> None:
    """`smoke` (the nightly's GPU job) runs both smoke stages again: their lines in cp936, as the seeds' users have."""
    workspace, first = windows_log
    assert first.returncode == 0
    said = torchbuild("cp936", workspace, "smoke", *CELL_ARGS, "--matrix", str(ROOT / "matrix.yaml"))
    assert said.returncode == 0, said.text[-4000:]
    assert_said_cleanly(said)
    assert "+ smoke-wheel passed" in said.stderr and "+ smoke-conda passed" in said.stderr


def _commands(workspace: Path, channel: Path) -> dict[str, list[str]]:
    wheel = next((workspace / "build" / CELL / "repair").glob("*.whl"))
    small = make_wheel(channel.parent, "torchbuild_fixture-1.0-py3-none-any.whl")  # a fixture: publish's lines, quickly
    return {
        "plan": ["plan", *CELL_ARGS],
        "matrix": ["matrix"],
        "doctor": ["doctor", *CELL_ARGS],
        "publish": ["publish", str(small), "--channel", str(channel)],
        "index": ["index", "--channel", str(channel)],
        "sbom": ["sbom", str(wheel)],
        "help": ["run", "--help"],
        "bad input": ["plan", "--cuda", "8.7", "--py", "3.11"],
        "missing wheel": ["run", *CELL_ARGS, "--wheel", "nowhere/torch-2.13.0-cp311-cp311-linux_x86_64.whl"],
    }


@pytest.fixture(scope="module")
def under_utf8(windows_log: tuple[Path, Said], module_scratch: Scratch) -> dict[str, Said]:
    """Each command's result under UTF-8: what every other encoding must match."""
    workspace, _ = windows_log
    channel = module_scratch("channel-utf-8") / "channel"
    return {name: torchbuild("utf-8", workspace, *args) for name, args in _commands(workspace, channel).items()}


@pytest.mark.parametrize("host", NOT_UTF8)
def test_every_command_ends_as_under_utf8(
    host: str, windows_log: tuple[Path, Said], under_utf8: dict[str, Said], module_scratch: Scratch
) -> None:
    workspace, _ = windows_log
    channel = module_scratch(f"channel-{host.replace(' ', '-')}") / "channel"
    for name, args in _commands(workspace, channel).items():
        said = torchbuild(host, workspace, *args)
        assert said.returncode == under_utf8[name].returncode, (name, said.text[-3000:])
        assert_said_cleanly(said)
    assert under_utf8["plan"].returncode == 0 and under_utf8["bad input"].returncode == 2
    assert under_utf8["publish"].returncode == 0 and (channel / "whl" / "simple" / "index.html").is_file()


def test_publish_of_a_build_folder_prints_every_line_in_the_ansi_code_page(
    windows_log: tuple[Path, Said], module_scratch: Scratch
) -> None:
    """The nightly's publish job: every cell's artifacts from build folders, to a channel, its output a CI log's."""
    workspace, _ = windows_log
    channel = module_scratch("channel-of-builds") / "channel"
    said = torchbuild("cp1252", workspace, "publish", str(workspace / "build"), "--channel", str(channel))
    assert said.returncode == 0, said.text[-3000:]
    assert_said_cleanly(said)
    assert f"cell {CELL}: " in said.stdout and (channel / "linux-64" / "repodata.json").is_file()
