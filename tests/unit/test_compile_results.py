"""torch.compile's check once per content (compile_results.py): what the content key covers and leaves out, a kept
result said as such, a failure or a damaged entry never kept, two environments of one content at the same time
checking once, and a cache folder that cannot be written (read-only, full) keeping nothing and failing no check, the
C++ consumer's object (consumer_cache.py) alike. The trees are small stand-ins for a site-packages folder (files of
their own, no torch); the real check on the real wheel's venv and conda prefix is in tests/integration/test_smoke.py.
"""

from __future__ import annotations

import multiprocessing
import re
import shutil
import time
from pathlib import Path

import pytest

from torchbuild.stages.smoke.resources import compile_results
from torchbuild.stages.smoke.resources.smoke_base import Outcome

# the content key describes the compiler (its -v output); the other tests need none
needs_compiler = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("g++") is None, reason="skipped: no C compiler to describe"
)


def _compiler() -> str:
    found = shutil.which("g++") or shutil.which("cc")
    assert found is not None
    return found


def _site_packages(root: Path, installer: str = "uv") -> Path:
    site = root / "lib" / "site-packages"
    (site / "torch" / "_inductor").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("import math\n")
    (site / "torch" / "_inductor" / "codecache.py").write_text("KEY = 1\n")
    (site / "torch" / "lib").mkdir()
    (site / "torch" / "lib" / "libtorch_cpu.so").write_bytes(b"\x7fELF" + bytes(range(256)))
    (site / "sympy").mkdir()
    (site / "sympy" / "__init__.py").write_text("__version__ = '1.13.3'\n")
    dist = site / "torch-2.13.0+cpu.dist-info"
    dist.mkdir()
    (dist / "INSTALLER").write_text(installer + "\n")
    (dist / "RECORD").write_text(f"torch/__init__.py,sha256=...,12\n# installed by {installer} at {root}\n")
    return site


@needs_compiler
def test_two_environments_of_one_content_have_one_key_whatever_their_paths_and_install_records(tmp_path: Path) -> None:
    wheel_venv = _site_packages(tmp_path / "venv", installer="uv")
    conda_prefix = _site_packages(tmp_path / "deeper" / "conda-prefix", installer="conda")
    (conda_prefix / "torch" / "__pycache__").mkdir()
    (conda_prefix / "torch" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"bytecode written by a check")
    assert compile_results.content_key(wheel_venv, _compiler()) == compile_results.content_key(
        conda_prefix, _compiler()
    )


@needs_compiler
@pytest.mark.parametrize(
    "change",
    [
        "a torch source",  # a conda install that rewrote a file, a different build
        "a library byte",
        "a dependency",  # sympy of another release: a wrong pin in the package's depends
        "a new file",
        "a distribution's version",
    ],
)
def test_any_change_to_what_torch_compile_reads_is_another_key(tmp_path: Path, change: str) -> None:
    site = _site_packages(tmp_path / "env")
    before = compile_results.content_key(site, _compiler())
    if change == "a torch source":
        (site / "torch" / "_inductor" / "codecache.py").write_text("KEY = 2\n")
    elif change == "a library byte":
        library = site / "torch" / "lib" / "libtorch_cpu.so"
        library.write_bytes(library.read_bytes()[:-1] + b"\x00")
    elif change == "a dependency":
        (site / "sympy" / "__init__.py").write_text("__version__ = '1.14.0'\n")
    elif change == "a new file":
        (site / "torch" / "_inductor" / "extra.py").write_text("")
    else:
        (site / "torch-2.13.0+cpu.dist-info").rename(site / "torch-2.13.1+cpu.dist-info")
    assert compile_results.content_key(site, _compiler()) != before


@needs_compiler
def test_an_environment_variable_torch_may_read_is_part_of_the_key_and_torchbuilds_own_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _site_packages(tmp_path / "env")
    before = compile_results.content_key(site, _compiler())
    monkeypatch.setenv("TORCHBUILD_REPODATA", str(tmp_path))
    monkeypatch.setenv("PWD", str(tmp_path))
    assert compile_results.content_key(site, _compiler()) == before
    monkeypatch.setenv("CXXFLAGS", "-O0")
    assert compile_results.content_key(site, _compiler()) != before


def _passing(calls: list[str]) -> Outcome:
    calls.append("compiled")
    return Outcome("passed", "torch.compile(sin(x) + cos(x)) matches eager for float32, float64")


def test_the_second_environment_reads_the_first_ones_result_and_says_so(tmp_path: Path) -> None:
    shared, calls = tmp_path / "smoke-compiled", list[str]()
    first = compile_results.once(shared, "a" * 64, lambda: _passing(calls))
    second = compile_results.once(shared, "a" * 64, lambda: _passing(calls))
    assert calls == ["compiled"]
    assert first.message == "torch.compile(sin(x) + cos(x)) matches eager for float32, float64"
    assert second.status == "passed"
    assert second.message.startswith(first.message + "; checked in an environment of the same content at ")
    assert "not compiled again here" in second.message and "key aaaaaaaaaaaa..." in second.message
    assert re.search(r"same content at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, not compiled", second.message)
    other = compile_results.once(shared, "b" * 64, lambda: _passing(calls))
    assert calls == ["compiled", "compiled"] and "not compiled again" not in other.message


def test_a_failed_or_skipped_check_is_not_kept(tmp_path: Path) -> None:
    shared, calls = tmp_path / "smoke-compiled", list[str]()

    def failing() -> Outcome:
        calls.append("failed")
        return Outcome("skipped", "skipped (torch 2.13.0: not supported)")

    assert compile_results.once(shared, "c" * 64, failing).status == "skipped"
    assert compile_results.once(shared, "c" * 64, lambda: _passing(calls)).message.endswith("float64")
    assert calls == ["failed", "compiled"]


def test_a_cache_folder_that_cannot_be_written_shares_nothing_and_fails_nothing(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    shared, calls = tmp_path / "a-file" / "smoke-compiled", list[str]()  # mkdir fails: NotADirectoryError
    first = compile_results.once(shared, "9" * 64, lambda: _passing(calls))
    second = compile_results.once(shared, "9" * 64, lambda: _passing(calls))
    assert first.status == second.status == "passed" and calls == ["compiled", "compiled"]


@pytest.mark.parametrize("damage", ["cut", "not json", "another key", "empty"])
def test_a_damaged_entry_is_checked_again(tmp_path: Path, damage: str) -> None:
    shared, calls = tmp_path / "smoke-compiled", list[str]()
    key = "d" * 64
    compile_results.once(shared, key, lambda: _passing(calls))
    entry = shared / f"{key}.json"
    text = entry.read_text()
    entry.write_text(
        {"cut": text[: len(text) // 2], "not json": "<html>", "another key": text.replace(key, "e" * 64), "empty": ""}[
            damage
        ]
    )
    again = compile_results.once(shared, key, lambda: _passing(calls))
    assert calls == ["compiled", "compiled"] and "not compiled again" not in again.message


def _slow_check(shared: str, log: str) -> None:
    def check() -> Outcome:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write("compiled\n")
        time.sleep(1.0)
        return Outcome("passed", "compiled")

    outcome = compile_results.once(Path(shared), "f" * 64, check)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(("reused" if "not compiled again" in outcome.message else "ran") + "\n")


def test_two_environments_at_once_compile_once_the_second_waits(tmp_path: Path) -> None:
    log = tmp_path / "log"
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=_slow_check, args=(str(tmp_path / "shared"), str(log))) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert sorted(log.read_text().split()) == ["compiled", "ran", "reused"]


def test_the_consumers_object_is_not_kept_where_the_cache_folder_cannot_be_written(tmp_path: Path) -> None:
    from torchbuild.stages.smoke.resources import consumer_cache

    folder, build = tmp_path / "env" / "torch", tmp_path / "build"
    (build / "CMakeFiles" / "consumer.dir").mkdir(parents=True)
    (build / "CMakeFiles" / "consumer.dir" / "link.txt").write_text(f"c++ consumer.cpp.o -o consumer -L{folder}/lib\n")
    (build / "CMakeFiles" / "consumer.dir" / "consumer.cpp.o").write_bytes(b"object")
    (tmp_path / "a-file").write_text("")
    consumer_cache.store(tmp_path / "a-file" / "smoke-consumer", "k" * 64, folder, build)  # no error: not kept
    consumer_cache.store(tmp_path / "shared", "k" * 64, folder, build)
    assert sorted(p.name for p in (tmp_path / "shared" / ("k" * 64)).iterdir()) == ["consumer.o", "link.json"]
