"""The linux repair's fast path (torchbuild/platforms/linux/manylinux.py) reaches auditwheel's own verdict: on the
real torch CPU wheel (already manylinux_2_28, nothing to vendor) and on small wheels of real gcc output that need a
library vendored, that need a newer glibc than the tag allows, or that need nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builders import real_torch_wheel, torch_plan
from tests.integration.support_source_repair import build_so, wheel_from_tree
from torchbuild.platforms.linux import elf, manylinux
from torchbuild.stages.repair import auditwheel_run

PLAN = torch_plan()
TAG = PLAN.wheel_tags.platform
EXT = "torch/_C.cpython-311-x86_64-linux-gnu.so"
PYINIT = "void PyInit__C(void) {}\n"


def _needs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "tree"
    build_so(tree / EXT, code=PYINIT, libs=["m"])
    return wheel_from_tree(tmp_path / "dist", PLAN.root.wheel, tree)


def _needs_vendoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    outside = tmp_path / "outside"
    foo = build_so(outside / "libfoo.so.1", soname="libfoo.so.1")
    tree = tmp_path / "tree"
    build_so(tree / EXT, needs=[foo], code=PYINIT)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(outside))
    return wheel_from_tree(tmp_path / "dist", PLAN.root.wheel, tree)


def _needs_a_newer_glibc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not glibc.startswith("glibc ") or tuple(map(int, glibc.split()[1].split(".")[:2])) < (2, 34):
        pytest.skip(f"skipped: needs a host with glibc >= 2.34 to build the too-new .so (host: {glibc or '?'})")
    code = PYINIT + "#include <pthread.h>\nvoid *f(void *a) { return a; }\n"
    code += "int g(void) { pthread_t t; return pthread_create(&t, 0, f, 0); }\n"  # pthread_create@GLIBC_2.34
    tree = tmp_path / "tree"
    build_so(tree / EXT, code=code)
    return wheel_from_tree(tmp_path / "dist", PLAN.root.wheel, tree)


def _the_torch_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return real_torch_wheel()


CASES: dict[str, tuple[Callable[[Path, pytest.MonkeyPatch], Path], bool]] = {
    "needs nothing": (_needs_nothing, True),
    "needs a library vendored": (_needs_vendoring, False),
    "needs a newer glibc": (_needs_a_newer_glibc, False),
}


def _both_verdicts(wheel: Path, tmp_path: Path) -> tuple[manylinux.Verdict, bool, str]:
    fast = manylinux.verdict(wheel, TAG, elf.check_wheel(wheel, TAG, scratch=tmp_path), scratch=tmp_path)
    analysis = auditwheel_run.analyse(wheel, TAG, auditwheel_run.auditwheel_excludes(wheel))
    compliant = analysis.eligible and not analysis.graft and not analysis.unlocated
    return fast, compliant, f"auditwheel: graft {analysis.graft}, consistent with {analysis.consistent_with}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_fast_verdict_is_auditwheels(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make, expected = CASES[case]
    fast, auditwheel, said = _both_verdicts(make(tmp_path, monkeypatch), tmp_path)
    assert (fast.compliant, auditwheel) == (expected, expected), (fast.reason, said)


# ~90 s (auditwheel analyses the whole 2.13.0 wheel): the nightly carries it (CI's time); the cases above run in CI
@pytest.mark.slow
@pytest.mark.nightly
def test_the_fast_verdict_is_auditwheels_on_the_real_torch_wheel(tmp_path: Path) -> None:
    fast, auditwheel, said = _both_verdicts(real_torch_wheel(), tmp_path)
    assert fast.compliant and auditwheel, (fast.reason, said)
    assert fast.reason.endswith(f"within {TAG}")
