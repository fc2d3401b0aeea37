"""Package checks (conda-verify's C11xx and torchbuild's TB1xx/TB2xx) on small real packages and wheels made in
tmp with py-rattler-build and zipfile, some then tampered with; the solve helper against the real repodata."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan, with_sbom
from tests.integration.support_conda import assemble_small, repack
from tests.pe_fixtures import PeFixtures
from torchbuild.conda import solve
from torchbuild.conda.archive import read_package
from torchbuild.conda.checks.package import check_package
from torchbuild.conda.requirements import requirement_to_conda, wheel_requires
from torchbuild.knowledge.pypi_to_conda import load as load_mapping
from torchbuild.results import CODES, Check
from torchbuild.wheel.checks import check_wheel
from torchbuild.wheel.wheelfile import WheelInfo

SITE = "lib/python3.11/site-packages"
GOOD_FILES = {
    f"{SITE}/tinypkg/__init__.py": b"VALUE = 42\n",
    f"{SITE}/tinypkg/data.txt": b"0123456789\n",
    "bin/tinytool": b"#!/bin/sh\necho tiny\n",
}


def by_code(checks: list[Check]) -> dict[str, Check]:
    return {c.code: c for c in checks}


def failed_codes(checks: list[Check]) -> set[str]:
    return {c.code for c in checks if c.status == "failed"}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return assemble_small(tmp_path_factory.mktemp("good"), GOOD_FILES)


# --- conda package ---------------------------------------------------------------------------------------


def test_good_package_passes_every_check(good: Path) -> None:
    checks = check_package(good)
    assert failed_codes(checks) == set()
    codes = by_code(checks)
    assert {c for c in CODES if c.startswith("C11") or c in ("TB100", "TB101", "TB102", "TB103")} <= set(codes)
    assert codes["TB103"].status == "passed"
    assert codes["C1146"].status == "passed"
    assert codes["TB100"].message == "conda, 3 payload files"
    assert all(c.file == str(good) for c in checks)
    assert codes["C1119"].status == "skipped" and "info/files" in codes["C1119"].message


def test_tampered_file_fails_sha256_check_only(good: Path, tmp_path: Path) -> None:
    # same length, different bytes: paths.json still has the old sha256
    bad = repack(good, tmp_path / good.name, {f"{SITE}/tinypkg/data.txt": b"9876543210\n"})
    codes = by_code(check_package(bad))
    assert failed_codes(list(codes.values())) == {"C1146"}
    assert f"{SITE}/tinypkg/data.txt" in codes["C1146"].message
    assert codes["C1146"].file == str(bad)


def test_changed_size_fails_size_check(good: Path, tmp_path: Path) -> None:
    bad = repack(good, tmp_path / good.name, {f"{SITE}/tinypkg/data.txt": b"longer than it was\n"})
    codes = by_code(check_package(bad))
    assert {"C1146", "C1147"} <= failed_codes(list(codes.values()))
    assert "19 bytes, paths.json says 11" in codes["C1147"].message


def test_forbidden_pyo_and_conda_meta_paths(tmp_path: Path) -> None:
    files = {**GOOD_FILES, f"{SITE}/tinypkg/mod.pyo": b"\0", "conda-meta/history": b"==> 2025 <==\n"}
    checks = check_package(assemble_small(tmp_path, files))
    codes = by_code(checks)
    assert failed_codes(checks) == {"C1125", "C1138"}
    assert codes["C1125"].message == "conda-meta/history"
    assert codes["C1138"].message == f"{SITE}/tinypkg/mod.pyo"


def test_uppercase_name_is_invalid(tmp_path: Path) -> None:
    # py-rattler-build writes the name as given into index.json but lower-cases the file name
    pkg = assemble_small(tmp_path, GOOD_FILES, name="Tinypkg")
    codes = by_code(check_package(pkg))
    assert codes["C1103"].status == "failed"
    assert "'Tinypkg'" in codes["C1103"].message
    assert codes["C1102"].status == "failed"


def test_name_with_invalid_character(good: Path, tmp_path: Path) -> None:
    index = json.loads(_info(good, "info/index.json"))
    index["name"] = "tiny!pkg"
    bad = repack(
        good, tmp_path / good.name.replace("tinypkg", "tiny!pkg"), {"info/index.json": json.dumps(index).encode()}
    )
    checks = check_package(bad)
    assert failed_codes(checks) == {"C1103"}
    assert "'tiny!pkg'" in by_code(checks)["C1103"].message


def test_name_ending_in_underscore_is_invalid(tmp_path: Path) -> None:
    checks = check_package(assemble_small(tmp_path, GOOD_FILES, name="tinypkg_"))
    assert failed_codes(checks) == {"C1103"}


def test_malformed_dependency(good: Path, tmp_path: Path) -> None:
    index = json.loads(_info(good, "info/index.json"))
    index["depends"] = ["python >=3.11,<3.12.0a0", "numpy >=1 <2 build extra", ""]
    bad = repack(good, tmp_path / good.name, {"info/index.json": json.dumps(index).encode()})
    codes = by_code(check_package(bad))
    assert codes["C1114"].status == "failed" and "numpy >=1 <2 build extra" in codes["C1114"].message
    assert codes["C1113"].status == "failed"


def test_paths_json_must_list_exactly_the_payload(good: Path, tmp_path: Path) -> None:
    paths = json.loads(_info(good, "info/paths.json"))
    paths["paths"] = [p for p in paths["paths"] if not p["_path"].endswith("data.txt")]
    paths["paths"].append({"_path": "bin/ghost", "path_type": "hardlink", "sha256": "0" * 64, "size_in_bytes": 1})
    bad = repack(good, tmp_path / good.name, {"info/paths.json": json.dumps(paths).encode()})
    tb101 = by_code(check_package(bad))["TB101"]
    assert tb101.status == "failed"
    assert "bin/ghost is listed but not in the payload" in tb101.message
    assert f"{SITE}/tinypkg/data.txt is in the payload but not listed" in tb101.message


def test_tar_bz2_package(tmp_path: Path) -> None:
    pkg = assemble_small(tmp_path, GOOD_FILES, tar_bz2=True)
    assert pkg.name == "tinypkg-1.0.0-py311_0.tar.bz2"
    checks = check_package(pkg)
    codes = by_code(checks)
    assert failed_codes(checks) == set()
    assert codes["TB100"].message == "tar.bz2, 3 payload files"
    assert codes["TB103"].status == "skipped"
    (tmp_path / "tampered").mkdir()
    tampered = repack(pkg, tmp_path / "tampered" / pkg.name, {"bin/tinytool": b"#!/bin/sh\necho evil\n"})
    assert failed_codes(check_package(tampered)) == {"C1146"}


def test_conda_container_must_store_its_entries(good: Path, tmp_path: Path) -> None:
    bad = repack(good, tmp_path / good.name, {}, compression=zipfile.ZIP_DEFLATED)
    tb103 = by_code(check_package(bad))["TB103"]
    assert tb103.status == "failed"
    assert "metadata.json is compressed" in tb103.message


def test_unreadable_package(good: Path, tmp_path: Path) -> None:
    truncated = tmp_path / good.name
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    checks = check_package(truncated)
    assert [(c.code, c.status) for c in checks] == [("TB100", "failed")]
    assert str(truncated) in checks[0].message


def test_windows_pe_machine_and_symlinks(tmp_path: Path, pe_fixtures: PeFixtures) -> None:
    files = {
        "Lib/site-packages/tinypkg/__init__.py": b"",
        "Lib/site-packages/tinypkg/good.dll": pe_fixtures.base.read_bytes(),
        "Lib/site-packages/tinypkg/old.pyd": pe_fixtures.base32.read_bytes(),
        "Lib/site-packages/tinypkg/fake.dll": b"MZ but nothing after it",
        "Scripts/tool.bat": b"@echo off\n",
        "Scripts/tool.exe": pe_fixtures.tool.read_bytes(),
    }
    pkg = assemble_small(
        tmp_path, files, subdir="win-64", symlinks={"Lib/site-packages/tinypkg/link.py": "__init__.py"}
    )
    checks = check_package(pkg)
    codes = by_code(checks)
    assert failed_codes(checks) == {"C1124", "C1127", "C1145"}
    fake, old = codes["C1145"].message.split("; ")
    assert fake.startswith("Lib/site-packages/tinypkg/fake.dll is not a readable PE file: ")
    assert old == "Lib/site-packages/tinypkg/old.pyd: I386"
    assert "symlink Lib/site-packages/tinypkg/link.py" in codes["C1124"].message
    assert codes["C1127"].message == "Scripts/tool.bat and Scripts/tool.exe"
    assert codes["C1144"].status == "passed"
    assert codes["TB102"].status == "passed" and "to spare" in codes["TB102"].message


def test_windows_path_over_max_path(tmp_path: Path) -> None:
    deep = "Lib/site-packages/tinypkg/" + "/".join(["a_rather_long_directory_name"] * 7) + "/LICENSE.txt"
    pkg = assemble_small(tmp_path, {deep: b"x"}, subdir="win-64")
    tb102 = by_code(check_package(pkg))["TB102"]
    assert tb102.status == "failed"
    assert "over MAX_PATH (259)" in tb102.message
    assert "C:\\Users\\" in tb102.message


def test_pe_files_are_read_with_pefile(tmp_path: Path, pe_fixtures: PeFixtures) -> None:
    files = {"Lib/site-packages/tinypkg/user.dll": pe_fixtures.user.read_bytes(), "Scripts/tool.exe": b"\x7fELF"}
    pkg = read_package(assemble_small(tmp_path, files, subdir="win-64"))
    members = {m.name: m for m in pkg.files()}
    user = members["Lib/site-packages/tinypkg/user.dll"].pe
    assert user is not None and user.machine == "AMD64" and "base.dll" in user.imports
    assert members["Scripts/tool.exe"].pe is None
    assert "Scripts/tool.exe is not a readable PE file" in members["Scripts/tool.exe"].pe_problem


def _info(pkg: Path, member: str) -> bytes:
    from torchbuild.conda.checks.package import read_package

    return read_package(pkg).info[member]


# --- wheel -----------------------------------------------------------------------------------------------


def test_wheel_checks(tmp_path: Path) -> None:
    plan = torch_plan()
    files = {"torch/__init__.py": b"x = 1\n"}
    good = with_sbom(make_wheel(tmp_path, plan.root.wheel, files))
    assert failed_codes(check_wheel(good, plan.root.wheel)) == set()
    (tmp_path / "plain").mkdir()
    plain = by_code(check_wheel(make_wheel(tmp_path / "plain", plan.root.wheel, files), plan.root.wheel))
    assert plain["TB206"].status == "failed"
    assert plain["TB206"].message == "no torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json"

    (tmp_path / "bad").mkdir()
    bad_record = with_sbom(
        make_wheel(tmp_path / "bad", plan.root.wheel, files, record_overrides={"torch/__init__.py": "sha256=AAAA,6"})
    )
    codes = by_code(check_wheel(bad_record, plan.root.wheel))
    assert failed_codes(list(codes.values())) == {"TB201"}
    assert "torch/__init__.py: sha256 differs from RECORD" in codes["TB201"].message

    (tmp_path / "tag").mkdir()
    wrong_tag = make_wheel(tmp_path / "tag", plan.root.wheel, files, tags=["cp312-cp312-manylinux_2_28_x86_64"])
    assert "differ from the file name's" in by_code(check_wheel(wrong_tag, plan.root.wheel))["TB202"].message

    other_python = torch_plan(python="3.12")
    assert "lacks the Plan's tag(s) cp312-cp312" in by_code(check_wheel(good, other_python.root.wheel))["TB202"].message

    (tmp_path / "escape").mkdir()
    escaping = make_wheel(tmp_path / "escape", plan.root.wheel, {**files, "../evil.py": b""})
    assert by_code(check_wheel(escaping, plan.root.wheel))["TB203"].message == "../evil.py ('..' component)"


# --- wheel Requires-Dist -> conda depends ----------------------------------------------------------------


def test_requires_dist_to_conda_specs() -> None:
    plan = torch_plan()
    wheel = WheelInfo(
        path=Path("torch.whl"),
        name="torch",
        version="2.13.0+cpu",
        dist_info="torch-2.13.0+cpu.dist-info",
        requires=(
            "filelock",
            "typing-extensions>=4.10.0",
            "sympy>=1.13.3",
            "setuptools; python_version >= '3.12'",
            'optree>=0.13.0; extra == "optree"',
            'nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux" and platform_machine == "x86_64"',
            'colorama; sys_platform == "win32"',
            "Jinja2 >=3, <4",
            "numpy ==1.26.*",
        ),
        tags=(),
        entry_points={},
    )
    assert wheel_requires(wheel, plan.conda.requirements) == (
        "filelock",
        "typing_extensions >=4.10.0",
        "sympy >=1.13.3",
        "libcublas 12.8.4.1.*",  # the wheel's exact pin, as conda-forge versions it (pypi_to_conda.yaml conda_versions)
        "jinja2 >=3,<4",
        "numpy 1.26.*",
    )
    windows = torch_plan(platform="win-64", python="3.12", torch="2.11.0")
    assert wheel_requires(wheel, windows.conda.requirements) == (
        "filelock",
        "typing_extensions >=4.10.0",
        "sympy >=1.13.3",
        "setuptools",
        "colorama",
        "jinja2 >=3,<4",
        "numpy 1.26.*",
    )


def test_an_nvidia_pin_becomes_the_conda_forge_version_of_the_same_library() -> None:
    mapping = load_mapping().names
    env = torch_plan().conda.marker_environment
    # nccl's conda version appends the package revision (2.27.5 -> 2.27.5.1): the prefix selects it
    assert requirement_to_conda("nvidia-nccl-cu12==2.27.5", env, mapping) == "nccl 2.27.5.*"
    assert requirement_to_conda("nvidia-nvshmem-cu12==3.4.5", env, mapping) == "libnvshmem3 3.4.5.*"
    # a range converts as any specifier does
    assert requirement_to_conda("nvidia-nvjitlink<14,>=13.0.88", env, mapping) == "libnvjitlink >=13.0.88,<14"
    # CUDA 11 wheels: conda-forge has no split CUDA 11 packages of their versions, the name alone is kept
    assert requirement_to_conda("nvidia-cublas-cu11==11.10.3.66", env, mapping) == "libcublas"


def test_marker_environment_is_the_target_not_the_host() -> None:
    env = torch_plan(platform="win-64", python="3.12", torch="2.11.0").conda.marker_environment
    assert env["sys_platform"] == "win32" and env["python_version"] == "3.12"
    mapping = load_mapping().names
    assert requirement_to_conda('pywin32; os_name == "nt"', torch_plan().conda.marker_environment, mapping) is None


# --- solve -----------------------------------------------------------------------------------------------


def test_solve_picks_the_local_package_and_needs_cuda_for_cuda_builds(repodata: Path, tmp_path: Path) -> None:
    cpu = assemble_small(
        tmp_path,
        GOOD_FILES,
        name="pytorch",
        version="9.9.0",
        build="py3.11_cpu_0",
        depends=["python >=3.11,<3.12.0a0", "filelock"],
    )
    cuda = assemble_small(
        tmp_path,
        GOOD_FILES,
        name="pytorch",
        version="9.9.0",
        build="py3.11_cuda12.4_0",
        depends=["python >=3.11,<3.12.0a0", "__cuda >=12.4"],
    )
    channel = solve.make_local_channel([cpu, cuda], tmp_path / "channel")
    assert (channel / "linux-64" / cpu.name).is_file()
    channels = [channel, repodata / "conda-forge"]

    got = solve.solve(channels, ["pytorch", "python 3.11.*"], "linux-64", solve.virtual_packages_for("linux-64"))
    names = {s.name: s for s in got}
    assert names["pytorch"].build == "py3.11_cpu_0"
    assert names["pytorch"].channel.rstrip("/") == channel.resolve().as_uri()
    assert names["python"].version.startswith("3.11.")
    assert "filelock" in names

    with pytest.raises(solve.Unsolvable, match="__cuda"):
        solve.solve(channels, ["pytorch=*=*cuda*"], "linux-64", solve.virtual_packages_for("linux-64"))
    with_driver = solve.solve(
        channels, ["pytorch=*=*cuda*", "python 3.11.*"], "linux-64", solve.virtual_packages_for("linux-64", "12.6")
    )
    assert {s.name: s.build for s in with_driver}["pytorch"] == "py3.11_cuda12.4_0"
