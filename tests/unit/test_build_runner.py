"""The build runner: log streaming, the first error line, the failure message, the timeout (real child processes)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchbuild.host import build_runner
from torchbuild.host.build_runner import Progress, first_error, run_build, step_of

GCC_FAIL = """\
[1/3] /usr/bin/c++ -O3 -fPIC -c /src/ext.cpp -o ext.cpp.o
FAILED: CMakeFiles/_ext.dir/src/ext.cpp.o
/usr/bin/c++ -O3 -fPIC -c /src/ext.cpp -o ext.cpp.o
/src/ext.cpp:12:3: error: 'undeclared' was not declared in this scope
   12 |   undeclared();
ninja: build stopped: subcommand failed.
error: command '/usr/bin/cmake' failed with exit code 1
"""
MSVC_FAIL = """\
[2817/6004] Building CXX object caffe2\\CMakeFiles\\torch_cpu.dir\\__\\aten\\src\\ATen\\Parallel.cpp.obj
[6003/6004] Linking CXX shared library bin\\torch_cpu.dll
FAILED: bin/torch_cpu.dll lib/torch_cpu.lib
torch_cpu.dll.def : fatal error LNK1161: invalid export specification
ninja: build stopped: subcommand failed.
"""
NVCC_FAIL = """\
[5/9] Building CUDA object CMakeFiles/k.dir/kernel.cu.o
FAILED: CMakeFiles/k.dir/kernel.cu.o
C:/src/kernel.cu(7): error: identifier "blockIdy" is undefined
1 error detected in the compilation of "C:/src/kernel.cu".
"""
HOST_CONFIG = (
    "C:\\CUDA\\v12.1\\include\\crt/host_config.h(153): fatal error C1189: #error:  -- unsupported Microsoft Visual "
    "Studio version! Only the versions between 2017 and 2022 (inclusive) are supported!"
)


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (GCC_FAIL, "/src/ext.cpp:12:3: error: 'undeclared' was not declared in this scope"),
        (MSVC_FAIL, "torch_cpu.dll.def : fatal error LNK1161: invalid export specification"),
        (NVCC_FAIL, 'C:/src/kernel.cu(7): error: identifier "blockIdy" is undefined'),
        ("[1/2] cl.exe ...\n" + HOST_CONFIG + "\nFAILED: x.obj\n", HOST_CONFIG),
        ("CMake Error at CMakeLists.txt:3 (project):\n  No CMAKE_CUDA_COMPILER could be found.\n",
         "CMake Error at CMakeLists.txt:3 (project):"),
        ("all good\n[3/3] Linking\n", None),
    ],
)
def test_first_error(output: str, expected: str | None) -> None:
    assert first_error(output.splitlines()) == expected


def test_step_of() -> None:
    assert step_of("[12/345] Building CXX object a.o") == "[12/345] Building CXX object a.o"
    assert step_of("[ 45%] Building CXX object b.o") == "[ 45%] Building CXX object b.o"
    assert step_of("-- Configuring done") is None


def _script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "tool.py"
    script.write_text(body)
    return [sys.executable, str(script)]


def test_success_streams_every_line_to_the_log(tmp_path: Path) -> None:
    argv = _script(
        tmp_path,
        "import os\nfor i in range(1, 4): print(f'[{i}/3] Building CXX object o{i}.o', flush=True)\n"
        "print('MAX_JOBS=' + os.environ['MAX_JOBS'])\n",
    )
    log = tmp_path / "build.log"
    stream = io.StringIO()
    outcome = run_build(argv, cwd=tmp_path, env={**os.environ, "MAX_JOBS": "7"}, log=log, timeout_s=60,
                        progress=Progress("build", stream, interactive=True))
    assert outcome.ok and outcome.error_line is None
    text = log.read_text()
    assert "[3/3] Building CXX object o3.o" in text and "MAX_JOBS=7" in text and "[exit 0 after" in text
    assert outcome.last_step == "[3/3] Building CXX object o3.o"
    assert "\r" in stream.getvalue()  # the progress line was drawn in place


def test_failure_message_has_first_error_tail_and_log(tmp_path: Path) -> None:
    body = "import sys\nsys.stdout.write(" + repr(GCC_FAIL) + ")\nsys.exit(1)\n"
    log = tmp_path / "build.log"
    outcome = run_build(_script(tmp_path, body), cwd=tmp_path, env=dict(os.environ), log=log, timeout_s=60,
                        progress=Progress("build", io.StringIO(), interactive=False))
    assert outcome.returncode == 1
    message = outcome.failure_message("the build (pip-wheel)", 3600)
    assert message.startswith("the build (pip-wheel) failed (exit 1) after 0:0")
    assert "First error: /src/ext.cpp:12:3: error: 'undeclared' was not declared in this scope" in message
    assert "  | ninja: build stopped: subcommand failed." in message
    assert message.endswith(f"Full log: {log}")


# The build starts a grandchild that would outlive a plain kill; the grandchild appends to ``beats`` every 0.1 s
# for a minute, so a file that stops growing says it was stopped (the same on Linux and on Windows).
TREE = """\
import os, subprocess, sys, time
beats = sys.argv[1]
beat = "import sys, time\\nfor _ in range(600):\\n    open(sys.argv[1], 'a').write('.')\\n    time.sleep(0.1)\\n"
subprocess.Popen([sys.executable, '-c', beat, beats])
deadline = time.monotonic() + 20
while not os.path.exists(beats) and time.monotonic() < deadline:
    time.sleep(0.05)
print('started the grandchild', flush=True)
time.sleep(60)
"""


def _tree(tmp_path: Path) -> tuple[list[str], Path]:
    beats = tmp_path / "beats"
    return [*_script(tmp_path, TREE), str(beats)], beats


def _stopped(beats: Path) -> bool:
    """Whether the grandchild has stopped beating (it had started: the build waited for the file)."""
    size = beats.stat().st_size
    time.sleep(1.0)
    return beats.stat().st_size == size


def test_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    argv, beats = _tree(tmp_path)
    log = tmp_path / "build.log"
    started = time.monotonic()
    outcome = run_build(argv, cwd=tmp_path, env=dict(os.environ), log=log, timeout_s=3,
                        progress=Progress("build", io.StringIO(), interactive=False))
    assert time.monotonic() - started < 20
    assert outcome.returncode is None and not outcome.ok
    assert "timed out after 0:03 (the Plan's build timeout)" in outcome.failure_message("the build", 3)
    assert "[timed out after" in log.read_text()
    assert _stopped(beats), "the build's grandchild still runs after the timeout"


def test_an_interrupted_build_is_stopped_with_its_whole_tree(tmp_path: Path) -> None:
    argv, beats = _tree(tmp_path)

    def interrupt(line: str) -> None:  # Ctrl-C arriving while the build runs
        if line == "started the grandchild":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_build(argv, cwd=tmp_path, env=dict(os.environ), log=tmp_path / "build.log", timeout_s=60,
                  progress=Progress("build", io.StringIO(), interactive=False), on_line=interrupt)
    assert _stopped(beats), "the build's grandchild still runs after the interrupt"


# A pipeline running a build, killed outright (kill -9, TerminateProcess): no handler of ours runs.
PIPELINE = """\
import io, os, sys
from pathlib import Path
from torchbuild.host.build_runner import Progress, run_build
run_build(sys.argv[1:], cwd=Path.cwd(), env=dict(os.environ), log=Path('build.log'), timeout_s=120,
          progress=Progress('build', io.StringIO(), interactive=False))
"""


def test_a_killed_pipeline_takes_the_builds_whole_tree_with_it(tmp_path: Path) -> None:
    argv, beats = _tree(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    pipeline = subprocess.Popen([sys.executable, "-c", PIPELINE, *argv], cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    deadline = time.monotonic() + 30
    while not beats.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pipeline.kill()
    pipeline.wait()
    assert _stopped(beats), "the build's grandchild still runs after the pipeline was killed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="skipped: a process's signals are POSIX's")
@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM"])
def test_a_build_ended_by_a_signal_says_which(tmp_path: Path, name: str) -> None:
    signum = int(getattr(signal, name))
    body = f"import os\nos.kill(os.getpid(), {signum})\n"
    outcome = run_build(_script(tmp_path, body), cwd=tmp_path, env=dict(os.environ), log=tmp_path / "build.log",
                        timeout_s=60, progress=Progress("build", io.StringIO(), interactive=False))  # fmt: skip
    assert outcome.returncode == -signum
    assert outcome.failure_message("the build", 60).startswith(f"the build failed (exit {-signum}) after 0:0")


def test_heartbeat_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    progress = Progress("build cell", stream, interactive=False)
    progress.update("[1/9] a")
    progress.update("[2/9] b")  # within HEARTBEAT_S of the first: not printed
    assert stream.getvalue().count("\n") == 1 and "[1/9] a" in stream.getvalue()
    monkeypatch.setattr(build_runner, "HEARTBEAT_S", 0.0)
    progress.update("[3/9] c")
    assert "[3/9] c" in stream.getvalue().splitlines()[-1]
