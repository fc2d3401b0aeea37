"""Windows MAX_PATH: the wheel's path budget under typical install roots (TB207), and the conda package's longest
paths in an environment and in the package cache, info/ included (TB102)."""

from __future__ import annotations

from pathlib import Path

from tests.builders import make_wheel, torch_plan, with_sbom
from tests.integration.support_conda import assemble_small
from torchbuild.conda import info_files
from torchbuild.conda.checks.package import check_package
from torchbuild.results import Check
from torchbuild.wheel.checks import check_wheel

WIN_WHEEL = "torch-2.13.0+cpu-cp312-cp312-win_amd64.whl"
DIST = "torch-2.13.0+cpu.dist-info"


def tb(checks: list[Check], code: str) -> Check:
    return next(c for c in checks if c.code == code)


def member(length: int) -> str:
    head = f"{DIST}/licenses/third_party/"
    return head + "d" * (length - len(head) - len("/LICENSE")) + "/LICENSE"


def test_torch_2_13s_longest_member_fits_every_root_pip_installs_into(tmp_path: Path) -> None:
    longest = member(171)  # torch 2.13.0's duktape LICENSE.txt is 171 characters long
    wheel = with_sbom(make_wheel(tmp_path, WIN_WHEEL, {"torch/__init__.py": b"", longest: b"MIT\n"}))
    check = tb(check_wheel(wheel, WIN_WHEEL, "pytorch-2.13.0-py3.12_cpu_0"), "TB207")
    assert check.status == "passed"
    assert check.message.startswith(f"longest member 171 characters ({longest}): fits an install root of up to 88 ")
    roots = "a venv 71 fits, python.org's installer (per user) 88 fits, the embeddable CPython 85 fits, "
    assert roots in check.message
    assert "a conda environment 81 fits, conda's package cache 92 does not fit (not enforced: " in check.message


def test_a_member_one_character_longer_fails_naming_the_root_and_the_path(tmp_path: Path) -> None:
    wheel = with_sbom(make_wheel(tmp_path, WIN_WHEEL, {"torch/__init__.py": b"", member(172): b"MIT\n"}))
    check = tb(check_wheel(wheel, WIN_WHEEL), "TB207")
    assert check.status == "failed"
    assert check.message.startswith(
        "python.org's installer (per user): 88 + 172 characters, over MAX_PATH (259): "
        "C:\\Users\\uuuuuuuuuuuuuuuuuuuu\\AppData\\Local\\Programs\\Python\\Python312\\Lib\\site-packages\\"
        "torch-2.13.0+cpu.dist-info\\licenses\\third_party\\"
    )
    assert "; longest member 172 characters" in check.message, "the budget line comes with the failure"


def test_a_linux_wheel_has_no_path_budget(tmp_path: Path) -> None:
    plan = torch_plan()
    wheel = with_sbom(make_wheel(tmp_path, plan.root.wheel, {"torch/__init__.py": b""}))
    check = tb(check_wheel(wheel, plan.root.wheel), "TB207")
    assert (check.status, check.message) == ("skipped", "not a Windows wheel (manylinux_2_28_x86_64): no MAX_PATH")


def test_the_package_cache_counts_info_files(tmp_path: Path) -> None:
    pkg = assemble_small(tmp_path, {"Lib/site-packages/tinypkg/__init__.py": b""}, subdir="win-64")
    fits = tb(check_package(pkg), "TB102")
    assert fits.status == "passed" and "to spare" in fits.message
    license_file = tmp_path / "LICENSE"
    license_file.write_text("MIT\n")
    deep = "licenses/" + "/".join(["a_long_third_party_directory"] * 6) + "/LICENSE"
    info_files.add(pkg, {deep: license_file}, level=3)
    over = tb(check_package(pkg), "TB102")
    assert over.status == "failed"
    assert over.message.startswith("package cache: ")
    assert "\\pkgs\\tinypkg-1.0.0-py311_0\\info\\licenses\\a_long_third_party_directory\\" in over.message
    assert "installed:" not in over.message, "info/ is not installed into the environment"


OWN_DIST = "torch-2.13.0a0+git1eba9b3.dist-info"
DUKTAPE = ("third_party/kineto/libkineto/third_party/dynolog/third_party/prometheus-cpp/3rdparty/civetweb/src/"
           "third_party/duktape-1.5.2/LICENSE.txt")  # fmt: skip


def test_an_own_builds_longer_version_gets_its_deep_license_files_renamed_to_fit(tmp_path: Path) -> None:
    """torch 2.13.0's duktape licence fits under the release's dist-info (171 characters) but not under a source
    build's (180): the repair renames it shorter, METADATA's License-File with it, and TB207 then passes."""
    from torchbuild.wheel import path_budget

    deep = f"{OWN_DIST}/licenses/{DUKTAPE}"
    shallow = f"{OWN_DIST}/licenses/LICENSE"
    name = "torch-2.13.0a0+git1eba9b3-cp311-cp311-win_amd64.whl"
    renames = path_budget.license_renames(name, [deep, shallow, "torch/__init__.py"], "3.11")
    assert list(renames) == [deep]
    new = renames[deep]
    assert new.startswith(f"{OWN_DIST}/licenses/third_party/") and new.endswith("/duktape-1.5.2/LICENSE.txt")
    assert len(new) < len(deep) and path_budget.license_renames(name, [new], "3.11") == {}
    metadata = f"Name: torch\r\nLicense-File: LICENSE\r\nLicense-File: {DUKTAPE}\r\n\r\nbody License-File: x\n".encode()
    renamed = path_budget.with_license_files_renamed(metadata, renames).decode()
    assert f"License-File: {new.partition('/licenses/')[2]}\r\n" in renamed
    assert "License-File: LICENSE\r\n" in renamed and renamed.endswith("\r\n\r\nbody License-File: x\n")
    # a Linux wheel has no MAX_PATH
    assert path_budget.license_renames(name.replace("win_amd64", "manylinux_2_28_x86_64"), [deep], "3.11") == {}
    # and the renamed wheel's budget passes where the original's fails
    before = with_sbom(make_wheel(tmp_path / "a", name, {"torch/__init__.py": b"", deep: b"MIT\n"},
                                  dist_info=OWN_DIST))  # fmt: skip
    after = with_sbom(make_wheel(tmp_path / "b", name, {"torch/__init__.py": b"", new: b"MIT\n"}, dist_info=OWN_DIST))
    assert tb(check_wheel(before, name), "TB207").status == "failed"
    assert tb(check_wheel(after, name), "TB207").status == "passed"
