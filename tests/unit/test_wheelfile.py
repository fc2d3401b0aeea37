"""Wheel validation against a Plan, on small real wheels built in tmp (stand-ins named torch, not the real torch)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.stages import Context, source
from torchbuild.wheel import wheelfile

GOOD = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
PLAN = torch_plan()


def _fails(path: Path, *fragments: str) -> str:
    with pytest.raises(wheelfile.WheelError) as info:
        wheelfile.validate(path, PLAN.expected_wheel())
    message = str(info.value)
    assert path.name in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_good_wheel_fits_the_plan(tmp_path: Path) -> None:
    wheel = wheelfile.validate(make_wheel(tmp_path, GOOD), PLAN.expected_wheel())
    assert wheel.name == "torch"
    assert str(wheel.version) == "2.13.0+cpu"
    assert wheel.platforms == {"manylinux_2_28_x86_64"}


def test_older_manylinux_and_unrepaired_linux_tags_fit_a_manylinux_2_28_plan(tmp_path: Path) -> None:
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",
    ):
        assert wheelfile.validate(make_wheel(tmp_path, name), PLAN.expected_wheel()).name == "torch"


def test_member_escaping_the_root_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, GOOD, extra_members={"../evil": b"x"})
    _fails(wheel, str(wheel), "escape the install root", "'../evil'")


@pytest.mark.parametrize(
    ("member", "why"),
    [("../evil", "'..' component"), ("torch/../../x", "'..' component"), ("/etc/passwd", "absolute path"),
     ("C:/Windows/x.dll", "drive letter"), ("c:evil", "drive letter"), ("torch\\..\\..\\x", "'..' component")],
)  # fmt: skip
def test_unsafe_member_names(member: str, why: str) -> None:
    assert wheelfile.unsafe_member(member) == why


def test_safe_member_names() -> None:
    for member in ("torch/lib/libc10.so", "torch-2.13.0+cpu.dist-info/RECORD", "torch/..hidden", "a/b..c"):
        assert wheelfile.unsafe_member(member) is None


def test_truncated_wheel_is_not_a_zip(tmp_path: Path) -> None:
    whole = make_wheel(tmp_path / "whole", GOOD).read_bytes()
    cut = tmp_path / GOOD
    cut.write_bytes(whole[: len(whole) // 2])
    _fails(cut, f"{cut} is not a wheel (not a zip archive / truncated)")


def test_missing_wheel(tmp_path: Path) -> None:
    _fails(tmp_path / GOOD, f"wheel not found: {tmp_path / GOOD}")


def test_wheel_of_another_package_names_expected_and_found(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "numpy-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    _fails(wheel, "distribution 'numpy', expected 'torch'", PLAN.root.wheel)


def test_wheel_for_another_platform_lists_the_accepted_tags(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-win_amd64.whl")
    _fails(wheel, "platform tag win_amd64", "manylinux_2_28_x86_64", "manylinux2014_x86_64", "linux_x86_64")


def test_newer_manylinux_than_the_plan_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-manylinux_2_34_x86_64.whl")
    _fails(wheel, "platform tag manylinux_2_34_x86_64")


def test_wrong_version_and_python(tmp_path: Path) -> None:
    _fails(make_wheel(tmp_path, "torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"),
           "version 2.13.0+cu130, expected 2.13.0+cpu")  # fmt: skip
    _fails(make_wheel(tmp_path, "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"),
           "python tag cp312, expected cp311")  # fmt: skip


def test_win_plan_expects_win_amd64(tmp_path: Path) -> None:
    plan = torch_plan(platform="win-64")
    assert plan.wheel_tags.accepted_platforms == ("win_amd64",)
    wheel = make_wheel(tmp_path, GOOD)
    with pytest.raises(wheelfile.WheelError, match="expected one that becomes win_amd64 for win-64: win_amd64"):
        wheelfile.validate(wheel, plan.expected_wheel())


def test_wheel_file_tags_must_match_the_file_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, GOOD, tags=["cp311-cp311-linux_x86_64"])
    _fails(wheel, "WHEEL (cp311-cp311-linux_x86_64) differ from the file name's (cp311-cp311-manylinux_2_28_x86_64)")


def test_malformed_wheel_tag_line(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, GOOD, tags=["cp311-manylinux_2_28_x86_64"])
    _fails(wheel, "malformed 'Tag: cp311-manylinux_2_28_x86_64'")


def test_dist_info_must_match_the_file_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, GOOD, dist_info="numpy-1.0.dist-info")
    _fails(wheel, "numpy-1.0.dist-info does not match the file name")


def test_read_metadata_and_wheel(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, GOOD)
    name = wheelfile.parse_name(path)
    with wheelfile.open_wheel(path) as archive:
        assert wheelfile.read_dist_info(archive, name, "METADATA")["Version"] == "2.13.0+cpu"
        assert wheelfile.read_dist_info(archive, name, "WHEEL")["Root-Is-Purelib"] == "false"
        assert {str(t) for t in wheelfile.wheel_file_tags(archive, name)} == {"cp311-cp311-manylinux_2_28_x86_64"}
        with pytest.raises(
            wheelfile.WheelError, match=re.escape("torch-2.13.0+cpu.dist-info/entry_points.txt is missing")
        ):
            wheelfile.read_dist_info(archive, name, "entry_points.txt")


def test_invalid_file_name(tmp_path: Path) -> None:
    bad = tmp_path / "torch.whl"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("x", b"")
    _fails(bad, "torch.whl is not a valid wheel file name")


# --- the source stage with --wheel ------------------------------------------------------------------------


def _ctx(tmp_path: Path, wheel: Path) -> Context:
    return Context(plan=PLAN, root=tmp_path / "ws", options=RunOptions(wheel=wheel, cache_dir=tmp_path / "cache"))


def test_source_copies_a_given_wheel_into_its_stage_dir(tmp_path: Path) -> None:
    given = make_wheel(tmp_path / "in", GOOD)
    result = source.run(_ctx(tmp_path, given))
    out = result.outputs["source_wheel"]
    assert out.path == tmp_path / "ws" / PLAN.stage_dirs["source"] / GOOD
    assert out.path.read_bytes() == given.read_bytes()
    assert out.size == given.stat().st_size
    assert str(given) in result.message


def test_source_refuses_a_bad_given_wheel_with_a_user_error(tmp_path: Path) -> None:
    given = make_wheel(tmp_path / "in", "torch-2.13.0+cpu-cp311-cp311-win_amd64.whl")
    with pytest.raises(UserError, match=r"^source: .*win_amd64.*expected one that becomes manylinux_2_28_x86_64"):
        source.run(_ctx(tmp_path, given))
    assert not (tmp_path / "ws" / PLAN.stage_dirs["source"] / given.name).exists()
