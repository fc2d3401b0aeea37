"""source -> build -> repair on the real torch 2.13.0 CPU wheel, pip against real (local) package indexes, and
auditwheel + the ELF closure check on small stand-in wheels (named torch, built from real gcc output) for the cases
the real wheel does not exercise: vendoring, a broken RUNPATH, a library nowhere to be found."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, real_torch_wheel, source_info, torch_plan
from tests.conftest import Scratch
from tests.integration.support_source_repair import (
    Index,
    build_so,
    http_index,
    use_only_index,
    wheel_from_tree,
)
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.pin import pin
from torchbuild.plan import Plan
from torchbuild.results import Artifact, StageResult
from torchbuild.stages import Context, source
from torchbuild.stages.build import stage
from torchbuild.stages.repair import stage as repair

__all__ = ["http_index"]  # the fixture, imported for pytest

PLAN = torch_plan()
TORCH_SHA256 = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
RELEASES = ["2.15.0", "2.14.1", "2.14.0", "2.13.0", "2.12.1", "2.12.0"]


def _ctx(
    root: Path,
    cache: Path,
    *,
    plan: Plan = PLAN,
    wheel: Path | None = None,
    inputs: dict[str, Artifact] | None = None,
) -> Context:
    return Context(plan=plan, root=root, options=RunOptions(wheel=wheel, cache_dir=cache), inputs=inputs or {})


# --- source ----------------------------------------------------------------------------------------------


def test_source_with_the_real_wheel_given(tmp_path: Path) -> None:
    given = real_torch_wheel()
    result = source.run(_ctx(tmp_path / "ws", tmp_path / "cache", wheel=given))
    out = result.outputs["source_wheel"]
    assert out.path == tmp_path / "ws" / PLAN.stage_dirs["source"] / PLAN.root.wheel
    assert (out.sha256, out.size) == (TORCH_SHA256, given.stat().st_size)
    assert result.status == "passed"


def test_source_finds_the_wheel_in_find_links_and_only_hashes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_FIND_LINKS", str(real_torch_wheel().parent))
    cache = tmp_path / "cache"
    result = source.run(_ctx(tmp_path / "ws", cache))
    out = result.outputs["source_wheel"]
    assert out.path.name == PLAN.root.wheel
    assert out.sha256 == TORCH_SHA256
    assert "not downloaded" in result.message
    assert not (cache / "wheels").exists() or not any((cache / "wheels").rglob("*.whl"))


@pytest.mark.slow
def test_source_downloads_once_then_uses_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_index: Index
) -> None:
    http_index.add(real_torch_wheel())
    use_only_index(monkeypatch, http_index)
    cache = tmp_path / "cache"

    first = source.run(_ctx(tmp_path / "ws1", cache))
    assert http_index.count(".whl") == 1
    assert "downloaded from http://127.0.0.1" in first.message
    entry = cache / "wheels" / TORCH_SHA256 / PLAN.root.wheel
    assert entry.is_file()
    assert first.outputs["source_wheel"].sha256 == TORCH_SHA256

    second = source.run(_ctx(tmp_path / "ws2", cache))
    assert http_index.count(".whl") == 1, "the second run downloaded the wheel again"
    # whether the index page is read again is uv's HTTP cache's call; the wheel is not fetched again
    assert "cached" in second.message
    assert second.outputs["source_wheel"].sha256 == TORCH_SHA256
    assert second.outputs["source_wheel"].path == tmp_path / "ws2" / PLAN.stage_dirs["source"] / PLAN.root.wheel


def test_source_says_what_it_looked_for_when_no_index_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, http_index: Index
) -> None:
    http_index.add(real_torch_wheel())  # cp311 only
    use_only_index(monkeypatch, http_index)
    plan = torch_plan(python="3.12")
    with pytest.raises(StageFailed) as info:
        source.run(_ctx(tmp_path / "ws", tmp_path / "cache", plan=plan))
    message = str(info.value)
    assert message.startswith(
        "source: pip finds no prebuilt wheel torch==2.13.0+cpu (cp312-cp312-manylinux_2_28_x86_64)"
    )
    assert "--wheel PATH" in message
    assert http_index.count(".whl") == 0


def test_newest_available_in_the_configured_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    # As pip is configured here: PyPI plus find-links /opt/wheels, where only 2.13.0+cpu is a linux-64 CPU build.
    monkeypatch.setenv("PIP_FIND_LINKS", str(real_torch_wheel().parent))
    assert pin.newest_available(PLAN, RELEASES) == "2.13.0"


def test_a_python_3_6_cell_finds_the_wheels_that_require_3_6_2() -> None:
    # PyPI's cp36m win_amd64 wheels of torch 1.8.0 to 1.10.2 say Requires-Python >=3.6.2; pip reads the cell's 3.6
    # as 3.6.0. Asked through pip's configured indexes (PyPI here), nothing downloaded.
    releases = ["1.11.0", "1.10.2", "1.8.0"]
    assert pin.newest_available(torch_plan(platform="win-64", python="3.6", torch="1.10.2"), releases) == "1.10.2"


def test_newest_available_on_a_local_index(monkeypatch: pytest.MonkeyPatch, http_index: Index) -> None:
    http_index.add(real_torch_wheel())
    use_only_index(monkeypatch, http_index)
    assert pin.newest_available(PLAN, RELEASES) == "2.13.0"
    assert pin.newest_available(PLAN, ["2.15.0", "2.14.0"]) is None
    assert pin.newest_available(torch_plan(python="3.12"), RELEASES) is None
    assert pin.newest_available(torch_plan(platform="win-64"), RELEASES) is None
    assert http_index.count(".whl") == 0


# --- build -----------------------------------------------------------------------------------------------


def test_build_passes_the_prebuilt_wheel_through(tmp_path: Path) -> None:
    wheel = Artifact.of(make_wheel(tmp_path, PLAN.root.wheel))
    result = stage.run(_ctx(tmp_path / "ws", tmp_path / "cache", inputs={"source_wheel": wheel}))
    assert (result.status, result.outputs["built_wheel"], result.message) == (
        "skipped", wheel, "prebuilt wheel: nothing to compile"
    )  # fmt: skip


# --- repair on the real wheel ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repaired_real(module_scratch: Scratch) -> tuple[Artifact, StageResult]:
    """source (--wheel) -> build -> repair on the real torch wheel, once for this module (about 1.5 minutes)."""
    given = real_torch_wheel()
    root = module_scratch("real")
    cache = root / "cache"
    got = source.run(_ctx(root, cache, wheel=given)).outputs
    built = stage.run(_ctx(root, cache, inputs=dict(got))).outputs
    return built["built_wheel"], repair.run(_ctx(root, cache, inputs={**got, **built}))


@pytest.mark.slow
def test_repair_of_the_real_wheel_keeps_its_name_and_passes_the_closure(
    repaired_real: tuple[Artifact, StageResult],
) -> None:
    given, result = repaired_real
    out = result.outputs["repaired_wheel"]
    assert out.path.name == PLAN.root.wheel
    assert out.path.parent.name == "repair"
    # Nothing to vendor and the tag is already right: every member as it was (its compressed bytes copied, not
    # recompressed), with the SBOM added to the .dist-info and RECORD.
    assert given.sha256 == TORCH_SHA256
    with zipfile.ZipFile(given.path) as before, zipfile.ZipFile(out.path) as after:
        old = {i.filename: (i.CRC, i.compress_size) for i in before.infolist() if not i.is_dir()}
        new = {i.filename: (i.CRC, i.compress_size) for i in after.infolist()}
    dist_info = "torch-2.13.0+cpu.dist-info"
    assert set(new) - set(old) == {f"{dist_info}/sboms/torchbuild.cdx.json"}
    assert {k: v for k, v in new.items() if k in old and k != f"{dist_info}/RECORD"} == {
        k: v for k, v in old.items() if k != f"{dist_info}/RECORD"
    }
    assert "nothing to vendor" in result.message
    summary = result.checks[-1]
    assert (summary.code, summary.status) == ("E100", "passed")
    assert "0 missing" in summary.message
    assert not [c for c in result.checks if c.status == "failed"]


@pytest.mark.slow
def test_repair_of_the_real_wheel_reports_the_test_binary_with_a_broken_runpath(
    repaired_real: tuple[Artifact, StageResult],
) -> None:
    # torch 2.13.0 ships torch/bin/test_shim with RUNPATH $ORIGIN only: it cannot find torch/lib/libtorch.so.
    _, result = repaired_real
    warnings = {(c.file, c.code, c.status) for c in result.checks if c.code == "W101"}
    assert warnings == {("torch/bin/test_shim", "W101", "skipped")}


# --- repair on stand-in wheels (real ELF files, named torch) ---------------------------------------------

STAND_IN = "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
EXT = "torch/_C.cpython-311-x86_64-linux-gnu.so"
PYINIT = "void PyInit__C(void) {}\n"


def _repair(tmp_path: Path, wheel: Path, plan: Plan = PLAN) -> StageResult:
    inputs = {"built_wheel": Artifact.of(wheel), "source_info": source_info(tmp_path / "source", wheel)}
    return repair.run(_ctx(tmp_path / "ws", tmp_path / "cache", plan=plan, inputs=inputs))


def test_repair_vendors_an_outside_library_and_retags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    foo = build_so(outside / "libfoo.so.1", soname="libfoo.so.1")
    cuda = build_so(tmp_path / "driver" / "libcuda.so.1", soname="libcuda.so.1")  # not on any search path
    tree = tmp_path / "tree"
    own = build_so(tree / "torch/lib/libtorch_tiny.so", soname="libtorch_tiny.so", runpath=["$ORIGIN"])
    build_so(tree / EXT, needs=[own, foo, cuda], runpath=["$ORIGIN/lib"], code=PYINIT)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(outside))

    result = _repair(tmp_path, wheel_from_tree(tmp_path / "dist", STAND_IN, tree))

    out = result.outputs["repaired_wheel"].path
    assert out.name == PLAN.root.wheel
    assert "vendored libfoo.so.1" in result.message
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        wheel_meta = archive.read("torch-2.13.0+cpu.dist-info/WHEEL").decode()
    assert [n for n in names if n.startswith("torch.libs/libfoo")], names
    assert not [n for n in names if "libcuda" in n or "libtorch_tiny-" in n]  # driver and own library not grafted
    assert "Tag: cp311-cp311-manylinux_2_28_x86_64" in wheel_meta
    summary = result.checks[-1]
    assert (summary.status, summary.code) == ("passed", "E100")
    assert "1 driver excludes" in summary.message


def test_repair_fails_naming_the_so_when_the_runpath_misses_its_own_library(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    own = build_so(tree / "torch/lib/libtorch_tiny.so", soname="libtorch_tiny.so")
    build_so(tree / EXT, needs=[own], code=PYINIT)  # no RUNPATH: torch/lib is never searched
    with pytest.raises(StageFailed) as info:
        _repair(tmp_path, wheel_from_tree(tmp_path / "dist", STAND_IN, tree))
    message = str(info.value)
    assert message.startswith("repair: import closure of ")
    assert f"{EXT} needs libtorch_tiny.so" in message


def test_repair_fails_naming_a_library_that_is_nowhere(tmp_path: Path) -> None:
    gone = build_so(tmp_path / "elsewhere" / "libgone.so.3", soname="libgone.so.3")
    tree = tmp_path / "tree"
    build_so(tree / EXT, needs=[gone], code=PYINIT)
    with pytest.raises(StageFailed, match=r"^repair: .*needs libgone\.so\.3.*cannot find it"):
        _repair(tmp_path, wheel_from_tree(tmp_path / "dist", STAND_IN, tree))


def test_repair_copies_a_wheel_that_needs_nothing(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    build_so(tree / EXT, code=PYINIT, libs=["m"])
    given = wheel_from_tree(tmp_path / "dist", PLAN.root.wheel, tree)
    result = _repair(tmp_path, given)
    with zipfile.ZipFile(given) as before, zipfile.ZipFile(result.outputs["repaired_wheel"].path) as after:
        assert after.read(EXT) == before.read(EXT)
        assert set(after.namelist()) - set(before.namelist()) == {
            "torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json"
        }
    assert "copied through" in result.message


@pytest.mark.slow  # pip downloads the msvc-runtime wheel into a fresh cache
def test_repair_on_win_64_vendors_what_the_wheel_imports(tmp_path: Path) -> None:
    """What a win-64 wheel gets is derived from its own import tables: a wheel without DLLs needs nothing (the
    vendoring of what real DLLs import is in tests/integration/test_windows.py and test_runtimes.py)."""
    from torchbuild.wheel.repair_report import RepairReport

    plan = torch_plan(platform="win-64", torch="2.5.1")
    wheel = make_wheel(tmp_path, plan.root.wheel)
    result = _repair(tmp_path, wheel, plan)
    assert "vendored nothing" in result.message
    assert RepairReport.read(result.outputs["repair_report"].path).vendored == ()
    # P103: at most one OpenMP runtime (none here)
    assert {c.code: c.status for c in result.checks} == {"P100": "passed", "P103": "passed"}


def test_repair_refuses_a_wheel_built_against_a_newer_glibc_than_the_tag(tmp_path: Path) -> None:
    # pthread_create@GLIBC_2.34 (glibc >= 2.34 moved it into libc): newer than manylinux_2_28 allows.
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    if not glibc.startswith("glibc ") or tuple(map(int, glibc.split()[1].split(".")[:2])) < (2, 34):
        pytest.skip(f"skipped: needs a host with glibc >= 2.34 to build the too-new .so (host: {glibc or '?'})")
    code = PYINIT + (
        "#include <pthread.h>\n"
        "void *f(void *a) { return a; }\n"
        "int g(void) { pthread_t t; return pthread_create(&t, 0, f, 0); }\n"
    )
    tree = tmp_path / "tree"
    build_so(tree / EXT, code=code)
    with pytest.raises(
        StageFailed, match=r"^repair: .* cannot be manylinux_2_28_x86_64: .*consistent with manylinux_2_3"
    ):
        _repair(tmp_path, wheel_from_tree(tmp_path / "dist", STAND_IN, tree))
