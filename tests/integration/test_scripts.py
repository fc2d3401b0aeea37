"""Console scripts in the conda package (wheel/install.py with installer; verify's TB110): a win-64 package carries
``Scripts\\<name>.exe`` launchers that start the environment's python.exe and run under Wine, the same wheel gives
the same bytes twice, and TB110 names a launcher that is missing or starts another Python."""

from __future__ import annotations

import hashlib
import io
import time
import zipfile
from pathlib import Path

import pytest
from installer.scripts import Script

from tests.builders import make_wheel, source_info, torch_plan
from tests.integration.support_conda import assemble_small, repack, tiny_torch_wheel
from torchbuild.conda.archive import read_package
from torchbuild.conda.checks.package import check_package
from torchbuild.config.options import RunOptions
from torchbuild.platforms.windows import environments, python_embed, wine
from torchbuild.results import Artifact, Check
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda
from torchbuild.wheel.install import install_wheel

WIN_SITE = "Lib/site-packages"


def _by_code(checks: list[Check]) -> dict[str, Check]:
    return {c.code: c for c in checks}


def _package(root: Path, wheel: Path) -> Path:
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    inputs = {"repaired_wheel": Artifact.of(wheel), "source_info": source_info(root / "source", wheel)}
    ctx = Context(plan=plan, root=root, options=RunOptions(compression_level=3), inputs=inputs)
    return conda.run(ctx).outputs["conda_package"].path


@pytest.fixture(scope="module")
def win_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_torch_wheel(tmp_path_factory.mktemp("wheel"), torch_plan("win-64", "cpu", "3.11", "2.14.1"))


@pytest.fixture(scope="module")
def win_package(tmp_path_factory: pytest.TempPathFactory, win_wheel: Path) -> Path:
    return _package(tmp_path_factory.mktemp("win") / "work", win_wheel)


def test_win64_package_carries_a_launcher_per_console_script(win_package: Path) -> None:
    pkg = read_package(win_package)
    launcher = {m.name: m for m in pkg.files()}["Scripts/torchrun.exe"]
    assert launcher.pe is not None and launcher.pe.machine == "AMD64"
    assert b"#!<launcher_dir>\\..\\python.exe\n" in launcher.data
    record = next(m for m in pkg.files() if m.name.endswith(".dist-info/RECORD"))
    assert record.name.startswith(WIN_SITE)
    tb110 = _by_code(check_package(win_package))["TB110"]
    assert (tb110.status, tb110.message) == ("passed", "Scripts\\torchrun.exe")


def test_the_same_wheel_gives_the_same_package_bytes(win_package: Path, win_wheel: Path, tmp_path: Path) -> None:
    # The launcher's appended zip would carry the clock's date; installer's launcher gets a fixed one.
    time.sleep(2)  # a zip date has a resolution of 2 s
    again = _package(tmp_path / "work", win_wheel)
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(win_package.read_bytes()).hexdigest()


def test_a_launcher_that_starts_another_python_fails_tb110(win_package: Path, tmp_path: Path) -> None:
    _name, elsewhere = Script("torchrun", "torch.distributed.run", "main", "console").generate(
        "C:\\Python311\\python.exe", "win-amd64"
    )
    tampered = repack(win_package, tmp_path / win_package.name, {"Scripts/torchrun.exe": elsewhere})
    tb110 = _by_code(check_package(tampered))["TB110"]
    assert tb110.status == "failed"
    assert tb110.message == (
        "Scripts/torchrun.exe starts C:\\Python311\\python.exe, not the environment's <launcher_dir>\\..\\python.exe"
    )


def test_a_missing_script_fails_tb110(tmp_path: Path) -> None:
    files = {
        f"{WIN_SITE}/tinypkg/__init__.py": b"def main():\n    return 0\n",
        f"{WIN_SITE}/tinypkg-1.0.0.dist-info/entry_points.txt": b"[console_scripts]\ntinytool = tinypkg:main\n",
    }
    tb110 = _by_code(check_package(assemble_small(tmp_path, files, subdir="win-64")))["TB110"]
    assert tb110.status == "failed"
    assert tb110.message == "Scripts/tinytool.exe is missing (console script tinytool = tinypkg:main)"


def test_launcher_runs_under_wine_with_the_environments_python(tmp_path: Path) -> None:
    found = wine.find()
    if found is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64)")
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    assert plan.windows is not None and plan.windows.embeddable is not None
    files = {"tinytool/__init__.py": b"import sys\ndef main():\n    print('ran with', sys.argv[1:])\n    return 3\n"}
    wheel = make_wheel(
        tmp_path, "tinytool-1.0-py3-none-any.whl", files, entry_points="[console_scripts]\ntinytool = tinytool:main\n"
    )
    prefix = tmp_path / "env"
    environments.python_env(python_embed.provision(plan.windows.embeddable, RunOptions().cache_dir), prefix)
    payload = install_wheel(wheel, plan.conda.install_scheme, prefix, windows=True)
    assert payload.scripts == ("Scripts/tinytool.exe",)
    with wine.Session(found, wine.fresh_prefix(found, RunOptions().cache_dir, tmp_path / "wineprefix")) as session:
        ran = session.run([str(prefix / "Scripts" / "tinytool.exe"), "--flag"], timeout=120, cwd=tmp_path)
    assert (ran.returncode, ran.stdout.strip()) == (3, "ran with ['--flag']"), ran.stderr


def test_record_lists_the_launcher_relative_to_site_packages(tmp_path: Path) -> None:
    wheel = tiny_torch_wheel(tmp_path, torch_plan("win-64", "cpu", "3.11", "2.14.1"))
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    install_wheel(wheel, plan.conda.install_scheme, tmp_path / "prefix", windows=True)
    record = (tmp_path / "prefix" / WIN_SITE / "torch-2.14.1+cpu.dist-info" / "RECORD").read_text()
    rows = {line.split(",")[0] for line in record.splitlines()}
    assert "../../Scripts/torchrun.exe" in rows and "torch-2.14.1+cpu.dist-info/INSTALLER" in rows
    with zipfile.ZipFile(io.BytesIO((tmp_path / "prefix" / "Scripts" / "torchrun.exe").read_bytes())) as launcher:
        assert launcher.getinfo("__main__.py").date_time == (1980, 1, 1, 0, 0, 0)
