"""smoke_checks.py as a user of a broken environment sees it, and how the stage reads its output.

The checks themselves run against real torch in tests/integration/test_smoke.py; here the script runs in a bare
virtual environment (no site-packages): a real "torch is missing" environment.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import real_torch_wheel, torch_plan
from torchbuild.stages.smoke.env import harness_end, not_started, started_twice
from torchbuild.stages.smoke.resources import checks_install, smoke_checks
from torchbuild.stages.smoke.resources.smoke_base import NotStarted
from torchbuild.stages.smoke.stage import parse_results, result, wheel_requirements
from torchbuild.stages.smoke.venv import VenvBackend

try:
    import resource
except ImportError:  # Windows (the tests that need it say so)
    resource = None  # type: ignore[assignment]

SCRIPT = Path(smoke_checks.__file__).with_name(smoke_checks.ENTRY)  # what the smoke stages run


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A virtual environment without pip or the host's packages: torch cannot be imported there."""
    venv = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return str(venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python"))


def run_script(
    cwd: Path, *args: str, python: str = sys.executable, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The script as the stage runs it, with ``env`` over the stage's variables; its output read as UTF-8 (JSON)."""
    return subprocess.run(
        [python, str(SCRIPT), "--expect-version", "2.13.0+cpu", "--expect-cuda", "cpu", *args],
        cwd=cwd,
        env={**smoke_checks.clean_env(), **(env or {})},
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )


def test_without_torch_every_check_fails_and_none_is_skipped_or_passed(tmp_path: Path, bare_python: str) -> None:
    proc = run_script(tmp_path, python=bare_python)
    assert proc.returncode == 1
    started, *lines = proc.stdout.splitlines()
    assert json.loads(started) == {"harness": "started"}
    results = [json.loads(line) for line in lines]
    assert [r["check"] for r in results] == smoke_checks.check_names()  # torchaudio's: only with --expect-torchaudio
    assert {r["status"] for r in results} == {"failed"}  # "cuda matmul" too: no torch is not "no GPU"
    by_name = {r["check"]: r for r in results}
    assert by_name["import"]["message"] == "ModuleNotFoundError: No module named 'torch'"
    assert "Traceback" in by_name["import"]["output"]
    assert list(tmp_path.iterdir()) == []  # the working directory stays empty


FAKE_TORCH = """\
# A FAKE torch, this test's only: enough for the import check, and an OpenMP probe that aborts the process the
# way "OMP: Error #15" does.
import os
import types

__version__ = "2.13.0+cpu"
version = types.SimpleNamespace(cuda=None)
backends = types.SimpleNamespace(openmp=types.SimpleNamespace(is_available=os.abort))
"""


def venv_with(tmp_path: Path, packages: dict[str, str]) -> str:
    """A venv (no pip) whose site-packages hold ``packages`` (name -> its __init__.py); its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    for name, text in packages.items():
        (purelib_of(python) / name).mkdir()
        (purelib_of(python) / name / "__init__.py").write_text(text, encoding="utf-8")
    return python


def purelib_of(python: str) -> Path:
    return Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip())  # fmt: skip


def test_a_crash_in_a_shared_process_fails_only_the_check_that_crashed(tmp_path: Path) -> None:
    python = venv_with(tmp_path, {"torch": FAKE_TORCH})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert smoke_checks.PROCESSES[0][:2] == ("import", "openmp mkl")  # the two share a process
    proc = run_script(cwd, "--only", "import", "--only", "openmp mkl", python=python)
    by_name = {r["check"]: r for r in map(json.loads, proc.stdout.splitlines()) if "check" in r}
    assert proc.returncode == 1
    assert by_name["import"]["status"] == "passed"
    assert by_name["openmp mkl"]["status"] == "failed"
    assert by_name["openmp mkl"]["message"] == "the check process died with signal 6 without a result"


FAKE_TORCHVISION = """\
# A FAKE torchvision, this test's only: its import aborts the process, as a companion built against another torch's
# C++ ABI can.
import os

os.abort()
"""


def test_a_companion_that_crashes_the_shared_process_fails_its_checks_and_leaves_torchs(tmp_path: Path) -> None:
    """torchvision's checks share the first process with torch's (one import of torch, as upstream's smoke test): a
    known-bad torchvision that aborts it fails each of its own checks, named, and torch's pass as they would alone."""
    python = venv_with(tmp_path, {"torch": FAKE_TORCH, "torchvision": FAKE_TORCHVISION})
    shared = ("import", "torchvision import", "torchvision nms")
    assert set(shared) <= set(smoke_checks.PROCESSES[0])
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    only = [arg for name in shared for arg in ("--only", name)]
    proc = run_script(cwd, "--expect-torchvision", "0.28.0", *only, python=python)
    by_name = {r["check"]: r for r in map(json.loads, proc.stdout.splitlines()) if "check" in r}
    assert proc.returncode == 1
    assert by_name["import"]["status"] == "passed"
    for name in shared[1:]:
        assert by_name[name]["status"] == "failed", by_name[name]
        assert by_name[name]["message"] == "the check process died with signal 6 without a result"


def test_every_check_runs_in_exactly_one_process() -> None:
    grouped = [name for group in smoke_checks.PROCESSES for name in group]
    assert sorted(grouped) == sorted(smoke_checks.CHECKS)
    assert smoke_checks.PROCESSES[0][0] == "import"


def test_only_runs_the_named_checks_and_rejects_unknown_ones(tmp_path: Path) -> None:
    proc = run_script(tmp_path, "--only", "cpu matmul")
    assert [json.loads(line).get("check") for line in proc.stdout.splitlines()] == [None, "cpu matmul"]
    bad = run_script(tmp_path, "--only", "gpu matmul")
    assert bad.returncode == 2
    assert "invalid choice: 'gpu matmul'" in bad.stderr and "'cuda matmul'" in bad.stderr


def test_parse_results_fails_missing_and_unknown_results_and_keeps_the_output() -> None:
    lines = [
        "some warning printed by a library",
        json.dumps({"check": "import", "status": "passed", "message": "torch 2.13.0+cpu"}),
        json.dumps(
            {"check": "cpu matmul", "status": "failed", "message": "relative error 1.0e-01", "output": "Traceback: ..."}
        ),
        json.dumps({"check": "cuda matmul", "status": "ok", "message": "?"}),
        json.dumps({"check": "not a check", "status": "passed"}),
    ]
    checks = {c.name: c for c in parse_results("conda", "\n".join(lines), "pytorch.conda")}
    assert list(checks) == [f"conda: {name}" for name in smoke_checks.check_names()]  # no torchaudio installed
    with_audio = [c.name for c in parse_results("conda", "\n".join(lines), "pytorch.conda", ["torchaudio"])]
    audio = ["torchaudio import", "torchaudio spectrogram", "torchaudio resample"]
    assert with_audio[-3:] == [f"conda: {name}" for name in audio]
    assert checks["conda: import"].status == "passed"
    assert checks["conda: import"].file == "pytorch.conda"
    assert checks["conda: cpu matmul"].message == "relative error 1.0e-01\nTraceback: ..."
    assert (checks["conda: cuda matmul"].status, checks["conda: cuda matmul"].message) == (
        "failed",
        "unknown status 'ok': ?",
    )
    # a check without a result never ran: the harness's failure, not the artifact's
    assert checks["conda: dataloader spawn"].status == "unverified"
    assert checks["conda: dataloader spawn"].message == (
        "not run: the smoke harness (smoke_checks.py) ended before this check; the harness's failure, not the "
        "artifact's"
    )


def test_the_dataloader_script_builds_its_loader_only_under_the_main_guard() -> None:
    # Under spawn each worker re-imports the script: a loader built at module level would recurse.
    tree = ast.parse(smoke_checks.DATALOADER_SCRIPT)
    guards = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
    assert len(guards) == 1
    outside = [n for n in tree.body if n is not guards[0]]
    assert "DataLoader(" not in "".join(ast.unparse(n) for n in outside if not isinstance(n, ast.ImportFrom))
    assert "multiprocessing_context='spawn'" in ast.unparse(guards[0])
    assert "num_workers=2" in ast.unparse(guards[0])


def test_clean_env_drops_what_would_hide_a_users_failure() -> None:
    host = {"KMP_DUPLICATE_LIB_OK": "TRUE", "PYTHONPATH": "/work", "LD_LIBRARY_PATH": "/x", "PATH": "/usr/bin"}
    env = smoke_checks.clean_env({**host, "PYTHONDONTWRITEBYTECODE": "1"})
    assert env == {"PATH": "/usr/bin", "PYTHONNOUSERSITE": "1"}


def test_wheel_requirements_leave_out_extras() -> None:
    assert wheel_requirements(real_torch_wheel()) == [
        "filelock",
        "typing-extensions>=4.10.0",
        "setuptools>=77.0.3",
        "sympy>=1.13.3",
        "networkx>=2.5.1",
        "jinja2",
        "fsspec>=0.8.5",
    ]


def test_the_script_finds_its_sibling_modules_without_its_folder_on_sys_path(tmp_path: Path) -> None:
    """python.org's embeddable CPython (the Wine smoke) reads a ._pth file, which leaves the script's folder off
    sys.path, as ``python -I`` does: the script must still import the modules copied beside it."""
    proc = subprocess.run([sys.executable, "-I", str(SCRIPT), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--expect-version" in proc.stdout


def _dist_info(site: Path, metadata_version: str, licenses: dict[str, str]) -> None:
    """An installed torch dist-info as its wheel lays it out: License-File names, the license files where that
    Metadata-Version puts them (``licenses``: name -> path in the dist-info), RECORD listing them."""
    info = site / "torch-1.10.1+cpu.dist-info"
    info.mkdir(parents=True)
    fields = "".join(f"License-File: {name}\n" for name in licenses)
    (info / "METADATA").write_text(f"Metadata-Version: {metadata_version}\nName: torch\nVersion: 1.10.1+cpu\n{fields}")
    for path in licenses.values():
        (info / path).parent.mkdir(parents=True, exist_ok=True)
        (info / path).write_text("license text\n")
    rows = [f"{info.name}/{p},," for p in ["METADATA", *licenses.values()]] + [f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def _check_dist_info(site: Path) -> str:
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from torchbuild.stages.smoke.resources.checks_install import check_dist_info\n"
        "from torchbuild.stages.smoke.resources.smoke_base import CheckFailed, Expect\n"
        "try:\n    print(check_dist_info(Expect('1.10.1+cpu', 'cpu', None, None)).message)\n"
        "except CheckFailed as exc:\n    print('failed:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_dist_info_finds_license_files_where_the_metadata_version_puts_them(tmp_path: Path) -> None:
    # torch 1.10.1's wheel (Metadata-Version 2.1): License-File: LICENSE and NOTICE beside METADATA
    _dist_info(tmp_path / "old", "2.1", {"LICENSE": "LICENSE", "NOTICE": "NOTICE"})
    assert _check_dist_info(tmp_path / "old").endswith("; 2 License-File fields, each in the dist-info")
    # PEP 639 (2.4, torch 2.13): under licenses/; one at the dist-info's top is not where the field says
    _dist_info(tmp_path / "new", "2.4", {"LICENSE": "licenses/LICENSE", "NOTICE": "NOTICE"})
    assert _check_dist_info(tmp_path / "new") == "failed: 1 License-File fields name no file in licenses/: NOTICE"


def test_files_of_record_are_found_absent_as_a_stat_of_each_would_say(tmp_path: Path) -> None:
    # the dist-info check lists each folder once instead of a stat per file (5 s for torch's files under Wine)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("")
    (tmp_path / "pkg" / "sub" / "b.pyd").write_text("")
    (tmp_path / "pkg" / "linked.dll").symlink_to(tmp_path / "pkg" / "a.py")
    (tmp_path / "pkg" / "dangling.dll").symlink_to(tmp_path / "pkg" / "gone.dll")
    names = ["a.py", "sub/b.pyd", "sub/c.pyd", "linked.dll", "dangling.dll", "nofolder/d.py", "sub", "A.PY"]
    paths = [str(tmp_path / "pkg" / name) for name in names]
    assert checks_install.not_there(paths) == [not os.path.exists(path) for path in paths]
    assert checks_install.not_there(paths) == [False, False, True, False, True, True, False, True]


VISION = [
    "torchvision import", "torchvision nms", "torchvision image io", "torchvision transforms", "torchvision model",
]  # fmt: skip


def test_torchvisions_checks_run_only_where_it_is_installed_and_fail_without_it(tmp_path: Path) -> None:
    """--expect-torchvision asks for torchvision's checks after torch's (its release is what the Plan says); the
    host's torch has no torchvision beside it here, so each fails naming the missing module, none is skipped."""
    assert smoke_checks.check_names(["torchvision"])[-len(VISION) :] == VISION
    assert not set(VISION) & set(smoke_checks.check_names(["torchaudio"]))
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(bare)], check=True)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    only = [arg for name in VISION for arg in ("--only", name)]
    proc = run_script(cwd, "--expect-torchvision", "0.28.0", *only, python=str(bare / "bin" / "python"))
    results = [json.loads(line) for line in proc.stdout.splitlines()[1:]]  # the first: the harness started
    assert [(r["check"], r["status"]) for r in results] == [(name, "failed") for name in VISION]
    assert {r["message"] for r in results} == {"ModuleNotFoundError: No module named 'torchvision'"}
    assert proc.returncode == 1 and list(cwd.iterdir()) == []


@pytest.mark.slow  # PyPI's torchvision 0.28.0 linux wheel (7.7 MB, kept in the cache), imported beside the host's torch
def test_pypis_cuda_torchvision_beside_a_cpu_torch_fails_the_import_check_naming_the_operator(tmp_path: Path) -> None:
    """The failure the companion pairing prevents, for real: PyPI's linux torchvision is a CUDA build; beside the
    host's CPU torch (2.13.0+cpu) its C++ operators cannot load, and its import stops at the first operator it
    registers. Every torchvision check fails with that message (the crash of the shared process reruns each alone)."""
    import zipfile

    from torchbuild.config.options import RunOptions
    from torchbuild.host import pip

    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not torch_version.endswith("+cpu"):
        pytest.skip(f"skipped: needs a CPU torch on this host (it has torch {torch_version})")
    dest = RunOptions().cache_dir / "wheels" / "companions"
    target = pip.target_args("3.11", "cp311", ["manylinux_2_28_x86_64"])
    (fetched,) = pip.download(["torchvision==0.28.0"], dest, log=tmp_path / "pip.log", target=target)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    with zipfile.ZipFile(fetched.path) as archive:
        archive.extractall(purelib_of(python))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    only = [arg for name in VISION for arg in ("--only", name)]
    proc = subprocess.run(
        [python, str(SCRIPT), "--expect-version", torch_version, "--expect-cuda", "cpu", "--expect-torchvision",
         "0.28.0", *only], cwd=cwd, env=smoke_checks.clean_env(), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    by_name = {r["check"]: r for r in map(json.loads, proc.stdout.splitlines()) if "check" in r}
    assert proc.returncode == 1
    assert list(by_name) == VISION
    for name in VISION:
        assert by_name[name]["status"] == "failed"
        assert by_name[name]["message"] == "RuntimeError: operator torchvision::nms does not exist"
    assert "torchvision/_meta_registrations.py" in by_name["torchvision import"]["output"]


def test_the_stage_tells_the_script_each_installed_companions_release_from_the_plan() -> None:
    from torchbuild.config.matrix import Cell, Matrix
    from torchbuild.plan import resolve
    from torchbuild.stages.smoke.env import expect_args

    plan = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.3.1"), Matrix())
    both = expect_args(plan, "C:\\torch\\__init__.py", ["torchvision", "torchaudio"])
    assert both[6:10] == ["--expect-torchvision", "0.18.1", "--expect-torchaudio", "2.3.1"]
    assert "--expect-torchvision" not in expect_args(plan, "C:\\torch\\__init__.py", ["torchaudio"])


def test_the_cpp_consumer_of_a_cuda_torch_without_its_cuda_toolkit_says_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA torch's TorchConfig.cmake stops without a toolkit of its CUDA: the check says why it did not run."""
    from torchbuild.stages.smoke.resources import checks_consumer, smoke_base

    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "none"))
    assert checks_consumer.cuda_toolkit_missing("12.8") == f"no {tmp_path / 'none' / 'include' / 'cuda_runtime_api.h'}"
    (tmp_path / "cu13" / "include").mkdir(parents=True)
    (tmp_path / "cu13" / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION  13000\n")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cu13"))
    assert checks_consumer.cuda_toolkit_missing("12.8") == f"CUDA toolkit 13.0 at {tmp_path / 'cu13'}, not CUDA 12.x"
    assert checks_consumer.cuda_toolkit_missing("13.0") == (  # installed in part, as this project's machines have it
        f"CUDA toolkit 13.0 at {tmp_path / 'cu13'} without libnvrtc.so, which find_package(Torch) links"
    )
    (tmp_path / "cu13" / "lib64").mkdir()
    (tmp_path / "cu13" / "lib64" / "libnvrtc.so").write_bytes(b"")
    assert checks_consumer.cuda_toolkit_missing("13.0") == ""
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: tmp_path)
    fields = {f: None for f in smoke_base.Expect.__dataclass_fields__} | {"version": "2.10.0+cu128", "cuda": "12.8"}
    if sys.platform == "win32" or smoke_base.cxx_compiler() is None or checks_consumer.shutil.which("cmake") is None:
        pytest.skip("skipped: needs a C++ compiler and cmake (the check says so before the toolkit)")
    outcome = checks_consumer.check_cpp_consumer(smoke_base.Expect(**fields))
    assert outcome.status == "skipped"
    assert outcome.message == (
        "skipped (a CUDA torch's find_package(Torch) needs the CUDA toolkit's headers and cudart of its CUDA 12.8: "
        f"this host has CUDA toolkit 13.0 at {tmp_path / 'cu13'}, not CUDA 12.x)"
    )


def test_hash_first_processes_start_beside_the_first_and_the_others_after_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The order of the check processes (what a stage's time is): a FAKE ``_run_shared`` stands for each process and
    records when it ran; the real checks are test_smoke.py's."""
    import os
    import threading
    import time

    from torchbuild.stages.smoke.resources import smoke_base

    events: list[tuple[str, str, float]] = []
    marker_seen: dict[str, bool] = {}
    lock = threading.Lock()

    def fake_run_shared(group: tuple[str, ...], expect: object, extra: dict[str, str]) -> list[dict[str, str]]:
        with lock:
            events.append(("start", group[0], time.monotonic()))
        if smoke_base.FIRST_DONE_ENV in extra:
            marker_seen[group[0]] = os.path.exists(extra[smoke_base.FIRST_DONE_ENV])
        time.sleep(0.3 if group == smoke_checks.PROCESSES[0] else 0.05)
        with lock:
            events.append(("end", group[0], time.monotonic()))
        return [{"check": name, "status": "passed", "message": "", "output": ""} for name in group]

    monkeypatch.setattr(smoke_checks, "_run_shared", fake_run_shared)
    assert smoke_checks.main(["--expect-version", "2.13.0+cpu", "--expect-cuda", "cpu", "--jobs", "3"]) == 0
    printed = [json.loads(line).get("check") for line in capsys.readouterr().out.splitlines()]
    assert printed == [None, *smoke_checks.check_names()]  # the harness's start, then every result in order
    first = smoke_checks.PROCESSES[0][0]
    first_end = next(t for kind, name, t in events if kind == "end" and name == first)
    starts = {name: t for kind, name, t in events if kind == "start"}
    early = {group[0] for group in smoke_checks.PROCESSES[1:] if smoke_checks.HASH_FIRST & set(group)}
    assert early == {"torch.compile", "dist-info"}  # the C++ consumer shares dist-info's process
    assert all(starts[name] < first_end for name in early)  # beside the first
    assert all(starts[name] >= first_end for name in starts if name not in early | {first})  # after it
    assert marker_seen == {"torch.compile": False, "dist-info": False}  # started before the first ended


def test_a_process_beside_the_first_waits_for_its_end_before_importing_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from torchbuild.stages.smoke.resources import smoke_base

    marker = tmp_path / "done"
    monkeypatch.setenv(smoke_base.FIRST_DONE_ENV, str(marker))
    threading.Timer(0.5, marker.touch).start()
    started = time.monotonic()
    smoke_base.after_first_process()
    assert marker.exists() and time.monotonic() - started >= 0.4
    monkeypatch.delenv(smoke_base.FIRST_DONE_ENV)
    started = time.monotonic()
    smoke_base.after_first_process()  # not started beside the first: nothing to wait for
    assert time.monotonic() - started < 0.1


# The harness's own faults, made for real: the harness runs with a limit of 6 open files, enough to start and run,
# too few for the pipes of a check's process (subprocess raises OSError "[Errno 24] Too many open files", as
# CreateProcess raised "[WinError 1359]" under a loaded Wine); with 4 the harness itself fails after its start.
STARTS_BUT_NO_CHILD = 6
HARNESS_FAILS = 4


def _limited(files: int) -> Callable[[], None]:
    """The soft limit of open files (the hard one stays: the test raises the soft one again, as the owner may)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (files, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def _harness(cwd: Path, python: str, files: int) -> subprocess.Popen[str]:
    argv = [python, str(SCRIPT), "--expect-version", "2.13.0+cpu", "--expect-cuda", "cpu", "--only", "cpu matmul"]
    return subprocess.Popen(argv, cwd=cwd, env=smoke_checks.clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_limited(files))  # fmt: skip


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="skipped: changing another process's limit is Linux's")
def test_a_check_process_that_cannot_start_is_retried_once_and_the_retry_is_said(
    tmp_path: Path, bare_python: str
) -> None:
    harness = _harness(tmp_path, bare_python, STARTS_BUT_NO_CHILD)
    assert harness.stderr is not None
    said = harness.stderr.readline()  # the harness says it will try again: the files it lacked are given now
    resource.prlimit(harness.pid, resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    stdout, _ = harness.communicate(timeout=120)
    assert said.startswith("smoke_checks: the process of cpu matmul could not be started (OSError: [Errno 24]")
    (check,) = parse_results("wheel", stdout, "torch.whl", ended="exited 1")[4:5]
    assert check.name == "wheel: cpu matmul" and check.status == "failed"  # it ran: no torch in a bare venv
    assert check.message.startswith("ModuleNotFoundError: No module named 'torch' (its process could not be started "
                                    "at first (OSError: [Errno 24] Too many open files) and started on the retry)")


@pytest.mark.skipif(resource is None, reason="skipped: the limit on open files is POSIX's")
def test_a_check_process_that_cannot_start_twice_is_not_run_and_leaves_the_stage_unverified(
    tmp_path: Path, bare_python: str
) -> None:
    # Before: the harness stopped and the stage said "wheel: import failed ... no result (smoke_checks.py stopped
    # before this check)": a fault of the host reported as the artifact's.
    stdout, _ = _harness(tmp_path, bare_python, STARTS_BUT_NO_CHILD).communicate(timeout=120)
    checks = {c.name: c for c in parse_results("wheel", stdout, "torch.whl", ended="exited 0")}
    matmul = checks["wheel: cpu matmul"]
    assert matmul.status == "unverified"
    assert matmul.message == (
        "not run: its process could not be started (tried twice: OSError: [Errno 24] Too many open files; then "
        "OSError: [Errno 24] Too many open files); the smoke harness's failure"
    )
    backend = VenvBackend(torch_plan(), sys.executable, tmp_path / "torch.whl")
    done = result("wheel", backend, [matmul])
    assert done.status == "unverified"  # the cell is published marked unverified, not failed, not passed
    assert done.message.startswith("not run (1 of the checks, not the artifact's fault): wheel: cpu matmul: its "
                                   "process could not be started (tried twice: OSError: [Errno 24]")  # fmt: skip


@pytest.mark.skipif(resource is None, reason="skipped: the limit on open files is POSIX's")
def test_a_harness_that_fails_after_its_start_leaves_its_checks_not_run_with_its_error(
    tmp_path: Path, bare_python: str
) -> None:
    harness = _harness(tmp_path, bare_python, HARNESS_FAILS)
    stdout, stderr = harness.communicate(timeout=120)
    ended = harness_end(harness.returncode, 60, stderr)
    assert ended.startswith("exited 1: OSError: [Errno 24] Too many open files")
    checks = {c.name: c for c in parse_results("wheel", stdout, "torch.whl", ended=ended)}
    assert {c.status for c in checks.values()} == {"unverified"} and "wheel: import" in checks
    assert checks["wheel: import"].message == (
        f"not run: the smoke harness (smoke_checks.py) {ended} before this check; the harness's failure, not the "
        "artifact's"
    )
    assert harness_end(None, 2400, "") == "timed out after 2400 s"
    assert harness_end(-9, 2400, "") == "was killed by signal 9"


def test_an_environment_whose_python_does_not_start_fails_the_smoke_harness_check(tmp_path: Path) -> None:
    """Not the host's fault: the environment (with the artifact in it) cannot run its python; named so, never
    "import failed"."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    python.chmod(0o755)
    proc = subprocess.run([str(python), str(SCRIPT)], capture_output=True, text=True, check=False)
    ended = harness_end(proc.returncode, 60, proc.stderr)
    checks = parse_results("conda", proc.stdout, "pytorch.conda", ended=ended)
    assert [(c.name, c.status) for c in checks[:2]] == [("conda: smoke harness", "failed"),
                                                         ("conda: import", "unverified")]  # fmt: skip
    assert checks[0].message == ("the environment's python did not start the smoke harness (smoke_checks.py exited 1: "
                                 "Fatal Python error: init_fs_encoding); no check ran")  # fmt: skip
    assert checks[1].message == "not run: the smoke harness did not start"


@pytest.mark.skipif(resource is None or not Path("/proc/self/fd").is_dir(), reason="skipped: counts open files "
                    "from /proc, limits them with setrlimit")  # fmt: skip
def test_a_harness_that_cannot_be_started_is_tried_twice_then_its_checks_are_not_run() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), hard))  # no room for its pipes
    try:
        with pytest.raises(NotStarted) as refused:
            started_twice(lambda: subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=False))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert str(refused.value) == "OSError: [Errno 24] Too many open files; then OSError: [Errno 24] Too many open files"
    (first, *_) = not_started("wheel", "torch.whl", [], refused.value)
    assert first.status == "unverified" and first.message == (
        "not run: the smoke harness's process could not be started (tried twice: OSError: [Errno 24] Too many open "
        "files; then OSError: [Errno 24] Too many open files); the host's failure"
    )
    with pytest.raises(FileNotFoundError):  # no interpreter there: the environment's fault, not retried
        started_twice(lambda: subprocess.run(["/no/such/python"], check=False))


FAKE_TORCH_READING_A_TEMPLATE = """\
# A FAKE torch, this test's only: its import reads a UTF-8 template with the locale's encoding, as torch's inductor
# does (torch/_inductor/utils.py load_template), which fails wherever that encoding is ASCII.
import os
import types

with open(os.path.join(os.path.dirname(__file__), "template.txt")) as handle:  # noqa: PLW1514 (that is the point)
    handle.read()
__version__ = "2.13.0+cpu"
version = types.SimpleNamespace(cuda=None)
"""
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""}


def _in_c_locale(cwd: Path, python: str) -> dict[str, dict[str, str]]:
    proc = run_script(cwd, "--only", "import", python=python, env=C_LOCALE)
    return {r["check"]: r for r in map(json.loads, proc.stdout.splitlines()) if "check" in r}


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: a C locale is a POSIX host's")
def test_a_check_that_fails_for_the_locale_passes_in_utf8_mode_naming_the_cause(tmp_path: Path) -> None:
    """A C locale without UTF-8 mode (a minimal container): the check fails there for every user, whatever the
    artifact; it runs again in UTF-8 mode, passes, and names the host's setting and the fix. (The real torch.compile
    under a C locale: the nightly's test_encodings.py main job.)"""
    python = venv_with(tmp_path, {"torch": FAKE_TORCH_READING_A_TEMPLATE})
    template = purelib_of(python) / "torch" / "template.txt"
    template.write_text("{# a template #} \u2192 {{ kernel }}\n", encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    said = _in_c_locale(cwd, python)["import"]
    assert said["status"] == "passed", said
    assert said["message"].startswith(
        f"{smoke_checks.LOCALE_RETRIED}: with this host's locale encoding (ANSI_X3.4-1968) it failed, "
        "UnicodeDecodeError: 'ascii' codec can't decode byte 0xe2"
    ), said["message"]
    assert "a user on such a host needs a UTF-8 locale (e.g. LANG=C.UTF-8) or PYTHONUTF8=1" in said["message"]

    # a template that is not UTF-8 either fails in both, saying both
    template.write_bytes(b"\xff\xfe not text\n")
    said = _in_c_locale(cwd, python)["import"]
    assert said["status"] == "failed", said
    assert said["message"].startswith("UnicodeDecodeError: 'ascii' codec can't decode byte 0xff"), said["message"]
    assert "; in UTF-8 mode (PYTHONUTF8=1) too: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff" in (
        said["message"]
    )
