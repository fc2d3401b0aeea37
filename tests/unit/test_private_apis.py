"""The internals of delvewheel and auditwheel torchbuild reads are where it reads them (delvewheel_api.py,
auditwheel_api.py), in the minor releases pyproject.toml admits; when a release moves one, these tests fail with
a message naming what moved, the release tested and the file to adapt."""

from __future__ import annotations

import re
from importlib import metadata

import pytest

from tests.conftest import ROOT
from torchbuild.platforms.linux import auditwheel_api
from torchbuild.platforms.windows import delvewheel_api


def _admitted(project: str) -> str:
    """The ``>=X.Y,<X.Z`` range pyproject.toml gives ``project``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(rf'"{project}(>=[\d.]+,<[\d.]+)"', text)
    assert found is not None, f"pyproject.toml gives {project} no range"
    return found[1]


def test_delvewheel_has_what_torchbuild_reads() -> None:
    assert delvewheel_api.check() == metadata.version("delvewheel")
    assert metadata.version("delvewheel").startswith(delvewheel_api.TESTED + ".")
    assert _admitted("delvewheel") == f">={delvewheel_api.TESTED},<1.14"
    names, patterns = delvewheel_api.system_dlls("AMD64")
    assert {"kernel32.dll", "user32.dll"} <= names and len(names) > 1000
    assert any(p.fullmatch("api-ms-win-crt-runtime-l1-1-0.dll") for p in patterns)
    assert delvewheel_api.is_vc_redist("msvcp140.dll") and not delvewheel_api.is_vc_redist("kernel32.dll")


def test_auditwheel_has_what_torchbuild_reads() -> None:
    assert auditwheel_api.check() == metadata.version("auditwheel")
    assert metadata.version("auditwheel").startswith(auditwheel_api.TESTED + ".")
    assert _admitted("auditwheel") == f">={auditwheel_api.TESTED},<6.9"


def test_a_moved_delvewheel_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from delvewheel import _dll_list

    monkeypatch.delattr(_dll_list, "vc_redist")
    delvewheel_api._dll_list.cache_clear()
    try:
        with pytest.raises(delvewheel_api.DelvewheelMoved) as moved:
            delvewheel_api.check()
    finally:
        delvewheel_api._dll_list.cache_clear()
    assert str(moved.value) == (
        f"delvewheel {metadata.version('delvewheel')} has no vc_redist pattern in its private module "
        "delvewheel._dll_list, which torchbuild reads for the DLLs every Windows has and the VC runtime's names; "
        'torchbuild is tested with delvewheel 1.13.x: install "delvewheel>=1.13,<1.14" (pyproject.toml) or adapt '
        "torchbuild/platforms/windows/delvewheel_api.py"
    )


def test_a_moved_auditwheel_internal_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from auditwheel import lddtree

    monkeypatch.delattr(lddtree, "_get_platform")
    auditwheel_api._modules.cache_clear()
    try:
        with pytest.raises(auditwheel_api.AuditwheelMoved) as moved:
            auditwheel_api.check()
    finally:
        auditwheel_api._modules.cache_clear()
    assert str(moved.value).startswith(
        f"auditwheel {metadata.version('auditwheel')} has no auditwheel.lddtree._get_platform, an internal of "
        "auditwheel torchbuild reads"
    )
    assert str(moved.value).endswith(
        'tested with auditwheel 6.8.x: install "auditwheel>=6.8,<6.9" (pyproject.toml) or adapt '
        "torchbuild/platforms/linux/auditwheel_api.py"
    )


def test_no_other_module_reads_them() -> None:
    readers = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "torchbuild").rglob("*.py")
        if re.search(r"^\s*(from|import) (auditwheel|delvewheel)\b", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
    allowed = {"torchbuild/platforms/linux/auditwheel_api.py", "torchbuild/platforms/windows/delvewheel_api.py"}
    assert readers - allowed == set(), "import auditwheel/delvewheel through auditwheel_api.py / delvewheel_api.py"
    assert readers, "the check finds the one module that imports delvewheel"
