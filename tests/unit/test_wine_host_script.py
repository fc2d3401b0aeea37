"""scripts/wine_host.py's parts that need no Wine: --cuda-path's bad input, the variables of a Windows CUDA build
machine, the prefix folders its providers go to, tests/under_wine.txt naming files that exist, and the PE fixtures
built on this side for the tests under Wine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import pe_fixtures
from tests.conftest import ROOT
from tests.integration.test_wine_host import _script


def test_a_cuda_path_that_is_no_version_is_refused_naming_the_form() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "wine_host.py"), "run", "--cuda-path", "12", "--",
                           "plan"], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.endswith("argument --cuda-path: '12' is not a CUDA version X.Y, e.g. 12.8")
    assert "Traceback" not in proc.stderr


def _machine() -> ModuleType:
    _script()  # puts scripts/ on the path, where wine_host.py imports its machine from
    return sys.modules["wine_machine"]


def test_the_build_machines_variables_and_folders_are_nvidias_and_intels_defaults(tmp_path: Path) -> None:
    script = _machine()
    env = script.build_machine_env("12.8")
    home = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.8"
    assert env == {"CUDA_PATH": home, "CUDA_PATH_V12_8": home, "ONEAPI_ROOT": "C:\\Program Files (x86)\\Intel\\oneAPI"}
    assert script.build_machine_env(None) == {}
    folder = tmp_path / "drive_c" / "Program Files" / "NVIDIA GPU Computing Toolkit" / "CUDA" / "v12.8" / "bin"
    assert script.drive_c(tmp_path, home + "\\bin") == folder


def test_the_host_has_windowss_defaults_unless_asked_for_the_utf8_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable makes Python's output UTF-8 there; the user is 'Zoë Ng'; this side's certificate bundle and
    find-links reach the Windows side as Z: paths (as POSIX paths they would name a folder of drive C:)."""
    machine = _machine()
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("PYTHONIOENCODING", "utf-8")  # this side's: never passed on as a setting of the host
    windows = machine.Settings()
    assert windows.user == "Zoë Ng" and windows.encoding == "cp1252"
    assert windows.env["USER"] == "Zoë Ng" and windows.env["PYTHONIOENCODING"] == windows.env["PYTHONUTF8"] == ""
    assert windows.env["PIP_CERT"] == "Z:\\etc\\ssl\\certs\\ca-certificates.crt"
    utf8 = machine.Settings(utf8=True)
    assert utf8.user is None and utf8.encoding == "utf-8" and utf8.env["PYTHONIOENCODING"] == "utf-8"


def test_every_quick_test_listed_for_wine_exists() -> None:
    listed = _script().quick_tests()
    assert "tests/unit/test_atomic_files.py" in listed
    assert [name for name in listed if not (ROOT / name).is_file()] == []


def test_the_pe_fixtures_built_here_are_what_the_fixture_takes_where_mingw_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pe_fixtures.missing_tools():
        pytest.skip("skipped: mingw-w64 is not installed (apt-get install mingw-w64)")
    built = tmp_path / "built"
    env = _script().prebuilt_pe_fixtures(built)
    assert env == {"TORCHBUILD_PE_FIXTURES": "Z:" + str(built).replace("/", "\\")}
    # the Windows side under Wine: no mingw-w64 on PATH, the variable naming the folder (here by its Linux path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setenv("TORCHBUILD_PE_FIXTURES", str(built))
    taken = pe_fixtures.build(tmp_path / "taken")
    assert taken.user == tmp_path / "taken" / "user.dll"
    assert taken.user.read_bytes() == (built / "user.dll").read_bytes()
    assert taken.ext310.read_bytes() == (built / "py310" / "ext.pyd").read_bytes()


def test_a_prebuilt_folder_without_the_fixtures_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setenv("TORCHBUILD_PE_FIXTURES", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match=r"base\.dll is missing: \$TORCHBUILD_PE_FIXTURES must name a folder"):
        pe_fixtures.build(tmp_path / "taken")
