"""The static ELF import-closure check, on real ELF files built with gcc."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.support_source_repair import build_so, wheel_from_tree
from torchbuild.platforms.linux import elf


@pytest.fixture
def stubs(tmp_path: Path) -> dict[str, Path]:
    """Libraries to link against that are NOT shipped in the tree: their SONAMEs become DT_NEEDED entries."""
    out = tmp_path / "stubs"
    return {
        "libcuda.so.1": build_so(out / "libcuda.so.1", soname="libcuda.so.1"),
        "libgone.so.3": build_so(out / "libgone.so.3", soname="libgone.so.3"),
        "libexpat.so.1": build_so(out / "libexpat.so.1", soname="libexpat.so.1"),
    }


def _tree(tmp_path: Path, stubs: dict[str, Path]) -> Path:
    """pkg/lib/libdep.so; pkg/_ok.so needs it via $ORIGIN/lib; pkg/_gone.so needs a library nowhere in the tree;
    pkg/_cuda.so needs libcuda.so.1 (driver); pkg/lib/libsib.so needs its sibling libdep.so without a RUNPATH."""
    root = tmp_path / "tree"
    dep = build_so(root / "pkg/lib/libdep.so", soname="libdep.so")
    build_so(
        root / "pkg/_ok.so",
        needs=[dep],
        runpath=["$ORIGIN/lib"],
        libs=["m"],
    )
    build_so(root / "pkg/_gone.so", needs=[stubs["libgone.so.3"]], runpath=["$ORIGIN/lib"])
    build_so(root / "pkg/_cuda.so", needs=[stubs["libcuda.so.1"]])
    build_so(root / "pkg/lib/libsib.so", soname="libsib.so", needs=[dep])
    (root / "pkg/__init__.py").write_text("")
    return root


def test_reads_needed_runpath_and_soname_from_a_real_elf(tmp_path: Path) -> None:
    dep = build_so(tmp_path / "lib/libdep.so", soname="libdep.so")
    ext = build_so(tmp_path / "_ext.so", needs=[dep], runpath=["$ORIGIN/lib", "/opt/elsewhere"])
    info = elf.read_elf(ext, "pkg/_ext.so")
    assert "libdep.so" in info.needed
    assert info.runpath == ("$ORIGIN/lib", "/opt/elsewhere")
    assert info.machine == "EM_X86_64"
    assert elf.read_elf(dep, "pkg/lib/libdep.so").soname == "libdep.so"


def test_closure_of_a_tree_resolves_wheel_system_and_driver_libraries(tmp_path: Path, stubs: dict[str, Path]) -> None:
    report = elf.check_tree(_tree(tmp_path, stubs), "manylinux_2_28_x86_64")
    via = {(r.file, r.needed): r.via for r in report.resolved}
    assert via[("pkg/_ok.so", "libdep.so")] == "wheel"
    assert via[("pkg/_ok.so", "libm.so.6")] == "system"
    assert via[("pkg/_cuda.so", "libcuda.so.1")] == "excluded"
    assert via[("pkg/lib/libsib.so", "libdep.so")] == "same-dir"
    assert [(m.file, m.needed) for m in report.missing] == [("pkg/_gone.so", "libgone.so.3")]
    assert not report.ok


def test_missing_library_gives_one_failing_check_naming_the_file_and_a_failing_summary(
    tmp_path: Path, stubs: dict[str, Path]
) -> None:
    checks = elf.check_tree(_tree(tmp_path, stubs), "manylinux_2_28_x86_64").checks()
    failed = [c for c in checks if c.code == "E101"]
    assert len(failed) == 1
    assert failed[0].status == "failed"
    assert failed[0].file == "pkg/_gone.so"
    assert "libgone.so.3" in failed[0].message
    assert "pkg/lib" in failed[0].message  # where it looked
    summary = checks[-1]
    assert (summary.code, summary.status) == ("E100", "failed")
    assert "1 missing" in summary.message


def test_a_complete_tree_passes_with_a_summary_check(tmp_path: Path, stubs: dict[str, Path]) -> None:
    root = _tree(tmp_path, stubs)
    (root / "pkg/_gone.so").unlink()
    report = elf.check_tree(root, "manylinux_2_28_x86_64")
    assert report.ok
    assert [(c.code, c.status) for c in report.checks()] == [("E103", "passed"), ("E100", "passed")]
    assert "1 driver excludes" in report.summary()


def test_library_found_elsewhere_in_the_wheel_is_still_missing_and_says_where(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    dep = build_so(root / "torch/lib/libtorch_tiny.so", soname="libtorch_tiny.so")
    build_so(root / "torch/_C.so", needs=[dep])  # no RUNPATH: the loader would not look in torch/lib
    report = elf.check_tree(root, "manylinux_2_28_x86_64")
    [missing] = report.missing
    assert (missing.file, missing.needed) == ("torch/_C.so", "libtorch_tiny.so")
    assert "torch/lib/libtorch_tiny.so" in missing.message


def test_runpath_that_leaves_the_wheel_does_not_count(tmp_path: Path) -> None:
    out = tmp_path / "outside"
    dep = build_so(out / "libcublas.so.12", soname="libcublas.so.12")
    root = tmp_path / "tree"
    build_so(root / "torch/lib/libtorch_cuda.so", needs=[dep], runpath=["$ORIGIN/../../nvidia/cublas/lib"])
    [missing] = elf.check_tree(root, "manylinux_2_28_x86_64").missing
    assert missing.needed == "libcublas.so.12"
    # $ORIGIN/../.. is site-packages: where the nvidia-* wheels would be, but nothing of this wheel is there
    assert missing.searched == ("nvidia/cublas/lib",)
    assert "nvidia/cublas/lib" in missing.message


def test_allowed_system_libraries_come_from_the_tags_policy(tmp_path: Path, stubs: dict[str, Path]) -> None:
    # libexpat.so.1 joined the manylinux whitelist after manylinux1 (auditwheel's policy data).
    root = tmp_path / "tree"
    build_so(root / "pkg/_x.so", needs=[stubs["libexpat.so.1"]])
    assert elf.check_tree(root, "manylinux_2_28_x86_64").ok
    old = elf.check_tree(root, "manylinux1_x86_64")
    assert [m.needed for m in old.missing] == ["libexpat.so.1"]
    assert old.policy == "manylinux_2_5_x86_64"


def test_executables_are_reported_but_not_enforced(tmp_path: Path, stubs: dict[str, Path]) -> None:
    root = tmp_path / "tree"
    build_so(root / "torch/bin/test_tool", needs=[stubs["libgone.so.3"]], executable=True)
    report = elf.check_tree(root, "manylinux_2_28_x86_64")
    assert report.ok
    [warning] = [c for c in report.checks() if c.code == "W101"]
    assert (warning.status, warning.file) == ("skipped", "torch/bin/test_tool")
    assert "torch/bin/test_tool" in report.summary()


def test_elf_for_another_architecture_fails(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    build_so(root / "pkg/_x.so")
    report = elf.check_tree(root, "manylinux_2_28_aarch64")
    [bad] = report.bad
    assert "EM_X86_64" in bad.reason and "EM_AARCH64" in bad.reason
    assert [c.code for c in report.checks() if c.status == "failed"] == ["E102", "E100"]


def test_truncated_elf_is_reported_not_a_traceback(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    so = build_so(root / "pkg/_x.so")
    so.write_bytes(so.read_bytes()[:40])
    [bad] = elf.check_tree(root, "manylinux_2_28_x86_64").bad
    assert bad.file == "pkg/_x.so"
    assert "not a readable ELF" in bad.reason


def test_check_wheel_gives_the_same_answer_as_the_unpacked_tree(tmp_path: Path, stubs: dict[str, Path]) -> None:
    root = _tree(tmp_path, stubs)
    wheel = wheel_from_tree(tmp_path / "dist", "pkg-1.0-cp311-cp311-linux_x86_64.whl", root)
    from_wheel = elf.check_wheel(wheel, "manylinux_2_28_x86_64")
    from_tree = elf.check_tree(root, "manylinux_2_28_x86_64")
    assert from_wheel.resolved == from_tree.resolved
    assert from_wheel.missing == from_tree.missing


def test_unknown_or_non_manylinux_tag_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a manylinux platform tag"):
        elf.policy_for("linux_x86_64")
    with pytest.raises(ValueError, match="no policy 'manylinux_2_99_x86_64'"):
        elf.policy_for("manylinux_2_99_x86_64")


def test_driver_excludes_are_documented() -> None:
    assert elf.excluded_reason("libcuda.so.1", elf.DRIVER_LIBRARIES)
    assert elf.excluded_reason("libnvidia-ml.so.1", elf.DRIVER_LIBRARIES)
    assert elf.excluded_reason("libcudart.so.12", elf.DRIVER_LIBRARIES) is None
