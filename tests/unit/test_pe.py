"""The PE import-closure check on real PE files built by mingw-w64 (tests/pe_fixtures.py)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from tests.pe_fixtures import PeFixtures
from torchbuild.platforms.windows import pe


def tree(root: Path, files: dict[str, Path]) -> Path:
    """A wheel laid out as installed: relative path -> the PE file to put there."""
    for rel, source in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / rel)
    return root


def zipped(root: Path, wheel: Path) -> Path:
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(root).as_posix())
    return wheel


def test_reads_imports_delay_imports_and_machine(pe_fixtures: PeFixtures) -> None:
    user = pe.read_pe(pe_fixtures.user.read_bytes(), "pkg/user.dll")
    assert user.machine == "AMD64"
    assert {"base.dll", "nothere.dll"} <= set(user.imports)
    assert user.delay_imports == ("lazy.dll",)
    assert pe.read_pe(pe_fixtures.base32.read_bytes(), "x.dll").machine == "I386"
    assert pe.machine_of(pe_fixtures.base32) == "I386"


def test_not_a_pe_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(pe.PeError, match=r"junk\.dll is not a readable PE file"):
        pe.read_pe(b"MZ" + b"\0" * 10, "junk.dll")


def test_missing_import_is_named_with_where_it_was_looked_for(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    files = {"pkg/user.dll": pe_fixtures.user, "pkg/base.dll": pe_fixtures.base, "pkg/lazy.dll": pe_fixtures.lazy}
    root = tree(tmp_path, files)
    report = pe.check_tree(root, python="3.11", search_dirs=())
    assert not report.ok
    assert [(m.file, m.needed, m.delay) for m in report.missing] == [("pkg/user.dll", "nothere.dll", False)]
    assert "pkg/user.dll imports nothere.dll" in report.missing[0].message
    assert "(pkg)" in report.missing[0].message
    assert "1 missing (nothere.dll)" in report.summary()
    failed = [c for c in report.checks() if c.status == "failed"]
    assert [c.code for c in failed] == ["P101", "P100"]


def test_delay_load_import_is_checked_too(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    files = {"pkg/user.dll": pe_fixtures.user, "pkg/base.dll": pe_fixtures.base, "pkg/nothere.dll": pe_fixtures.base}
    root = tree(tmp_path, files)
    report = pe.check_tree(root, python="3.11", search_dirs=())
    assert [(m.needed, m.delay) for m in report.missing] == [("lazy.dll", True)]
    assert "delay-loads lazy.dll" in report.missing[0].message
    shutil.copyfile(pe_fixtures.lazy, root / "pkg" / "lazy.dll")
    report = pe.check_tree(root, python="3.11", search_dirs=())
    assert report.ok, report.summary()
    assert any(r.needed == "lazy.dll" and r.delay and r.via == "wheel" for r in report.resolved)


def test_32_bit_dll_is_refused(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/base.dll": pe_fixtures.base32})
    report = pe.check_tree(root, python="3.11")
    assert not report.ok
    assert [b.reason for b in report.bad] == ["pkg/base.dll is built for I386; the wheel's platform needs AMD64"]


def test_search_dirs_are_the_package_dll_directories(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    # user.dll in one package, the DLLs it imports in torch/lib (which torch adds to the DLL search path).
    root = tree(
        tmp_path,
        {
            "pkg/user.dll": pe_fixtures.user,
            "torch/lib/BASE.DLL": pe_fixtures.base,  # Windows compares names case-insensitively
            "torch/lib/nothere.dll": pe_fixtures.base,
            "torch/lib/lazy.dll": pe_fixtures.lazy,
        },
    )
    assert pe.check_tree(root, python="3.11", search_dirs=["torch/lib"]).ok
    unreached = pe.check_tree(root, python="3.11", search_dirs=[])
    assert {m.needed for m in unreached.missing} == {"base.dll", "nothere.dll", "lazy.dll"}
    assert "the wheel has it at torch/lib/BASE.DLL, which is not on the search path" in unreached.missing[0].message


def test_pythonxy_dll_must_be_the_plans_python(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/ext.pyd": pe_fixtures.ext, "pkg.libs/msvcp140.dll": pe_fixtures.base})
    assert pe.check_tree(root, python="3.11", search_dirs=["pkg.libs"]).ok
    wrong = pe.check_tree(root, python="3.12", search_dirs=["pkg.libs"])
    assert [m.needed for m in wrong.missing] == ["python311.dll"]


def test_vc_runtime_is_not_a_system_dll(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    """The 'DLL load failed' users hit: MSVCP140.dll is neither in Windows nor shipped with Python."""
    root = tree(tmp_path, {"pkg/ext.pyd": pe_fixtures.ext})
    report = pe.check_tree(root, python="3.11")
    assert report.missing_names == ("msvcp140.dll",)
    assert report.count("python") == 1  # python311.dll
    assert report.count("system") == 2  # KERNEL32.dll, msvcrt.dll


def test_executables_are_reported_not_enforced(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/bin/tool.exe": pe_fixtures.tool, "torch/lib/base.dll": pe_fixtures.base})
    report = pe.check_tree(root, python="3.11", search_dirs=["torch/lib"])
    assert report.ok
    assert [(m.file, m.needed) for m in report.unenforced] == [("pkg/bin/tool.exe", "base.dll")]
    assert [c.status for c in report.checks() if c.code == "W201"] == ["skipped"]


def test_wheel_and_tree_agree(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    files = {"pkg/user.dll": pe_fixtures.user, "pkg/base.dll": pe_fixtures.base, "pkg/x.dll": pe_fixtures.base32}
    root = tree(tmp_path / "t", files)
    wheel = zipped(root, tmp_path / "pkg-1.0-cp311-cp311-win_amd64.whl")
    from_tree = pe.check_tree(root, python="3.11")
    from_wheel = pe.check_wheel(wheel, python="3.11")
    assert from_wheel == from_tree
    assert from_wheel.summary().startswith("3 PE files (AMD64)")
    assert [b.file for b in from_wheel.bad] == ["pkg/x.dll"]


def test_a_pe_suffix_without_a_pe_inside_is_bad(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-cp311-cp311-win_amd64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pkg/fake.dll", b"not a dll")
    report = pe.check_wheel(wheel, python="3.11")
    assert [b.reason for b in report.bad] == ["pkg/fake.dll has a PE suffix but no MZ header"]


def test_system_set_comes_from_data() -> None:
    system = pe.load_system_set()
    assert system.is_system("KERNEL32.dll") and system.is_system("api-ms-win-crt-heap-l1-1-0.dll")
    assert not system.is_system("msvcp140.dll") and not system.is_system("vcruntime140_1.dll")
    assert system.python_dlls("3.11") == {"python311.dll", "python3.dll", "vcruntime140.dll"}
    assert {"nvcuda.dll", "nvml.dll"} <= system.driver
