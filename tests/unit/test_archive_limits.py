"""Decompression bombs: a small archive that would unpack to gigabytes, or to countless empty files, is refused from
its directory (a zip) or its tar headers (a conda package, an sdist) before anything is extracted, with one line
naming the archive, the limit and the variable that raises it (TORCHBUILD_MAX_UNPACKED, TORCHBUILD_MAX_RATIO,
TORCHBUILD_MAX_MEMBERS). Real bombs, built here: a wheel and a conda package each holding one member of zeros that
deflate / zstd / bzip2 shrink about a thousand times; a wheel of 100,001 empty members."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import ROOT
from tests.integration.support_conda import assemble_small
from torchbuild.conda import info_files
from torchbuild.errors import UserError
from torchbuild.host import archives
from torchbuild.wheel import wheelfile

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
REAL_TORCH = Path("/opt/wheels") / WHEEL
BOMB = 256 << 20  # bytes of zeros: deflate makes them about 250 KiB (1 GiB would do the same, only slower to build)
RUN = ("--platform", "linux-64", "--cuda", "cpu", "--py", "3.11", "--torch", "2.13.0")


def bomb_wheel(directory: Path) -> Path:
    """A torch wheel whose RECORD is right, with one deflated member of BOMB zeros, written as a stream."""
    plain = make_wheel(directory / "plain", WHEEL, {"torch/__init__.py": b"__version__ = '2.13.0+cpu'\n"})
    digest = hashlib.sha256()
    block = bytes(1 << 20)
    for _ in range(BOMB // len(block)):
        digest.update(block)
    row = f"torch/lib/zeros.bin,sha256={base64.urlsafe_b64encode(digest.digest()).decode().rstrip('=')},{BOMB}\n"
    path = directory / WHEEL
    with zipfile.ZipFile(plain) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for info in source.infolist():
            data = source.read(info)
            bomb.writestr(info.filename, row.encode() + data if info.filename.endswith("/RECORD") else data)
        with bomb.open("torch/lib/zeros.bin", "w") as member:
            for _ in range(BOMB // len(block)):
                member.write(block)
    shutil.rmtree(plain.parent)
    return path


def disk_use(root: Path) -> int:
    return sum(p.lstat().st_size for p in root.rglob("*"))


def pipeline(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "COLUMNS": "300", "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def test_a_wheel_bomb_is_refused_before_anything_runs_and_nothing_is_unpacked(tmp_path: Path) -> None:
    """The pin step reads the wheel's torch/version.py (what an own build says of itself) through the checked reader:
    a bomb is refused there, as bad input, before any stage."""
    wheel = bomb_wheel(tmp_path / "in")
    assert wheel.stat().st_size < 1 << 20
    work = tmp_path / "work"
    work.mkdir()
    result = pipeline([*RUN, "--wheel", str(wheel), "--cache-dir", "build/cache"], work)
    shown = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, shown
    assert (
        f"error: {wheel} has a member 'torch/lib/zeros.bin' that unpacks to 256.0 MiB from 0.2 MiB" in shown
        and "more than the limit of 100): refused as a decompression bomb; nothing was unpacked. If the archive is "
        "genuine, raise the limit with TORCHBUILD_MAX_RATIO (e.g. TORCHBUILD_MAX_RATIO=" in shown
    ), shown
    assert "Traceback" not in shown
    assert disk_use(work) < 1 << 20  # not the 256 MiB member, nor the wheel


def test_the_total_limit_names_its_variable_and_the_override_admits_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = bomb_wheel(tmp_path)
    monkeypatch.setenv("TORCHBUILD_MAX_RATIO", "5000")  # past the ratio; the total decides
    monkeypatch.setenv("TORCHBUILD_MAX_UNPACKED", "100MiB")
    with pytest.raises(wheelfile.WheelError) as refused:
        wheelfile.open_wheel(wheel)
    assert str(refused.value) == (
        f"{wheel} would unpack to 256.0 MiB, more than the limit of 100.0 MiB: refused as a decompression bomb; "
        "nothing was unpacked. If the archive is genuine, raise the limit with TORCHBUILD_MAX_UNPACKED "
        "(e.g. TORCHBUILD_MAX_UNPACKED=1GiB)."
    )
    monkeypatch.setenv("TORCHBUILD_MAX_UNPACKED", "1GiB")
    with wheelfile.open_wheel(wheel) as archive:
        assert len(archive.read("torch/lib/zeros.bin")) == BOMB


@pytest.mark.parametrize("tar_bz2", [False, True], ids=["conda", "tar.bz2"])
def test_a_conda_package_bomb_is_refused_from_its_tar_headers(tmp_path: Path, tar_bz2: bool) -> None:
    package = assemble_small(tmp_path / "made", {"lib/zeros.bin": bytes(BOMB)}, name="pytorch", version="2.13.0",
                             build="py3.11_cpu_0", tar_bz2=tar_bz2)  # fmt: skip
    assert package.stat().st_size < 1 << 20
    work = tmp_path / "work"
    work.mkdir()
    result = pipeline(["publish", str(package), "--channel", "channel"], work)
    shown = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0, shown
    assert f"{package} unpacks to at least 256.0 MiB from" in shown, shown
    assert "refused as a decompression bomb; nothing was unpacked" in shown and "TORCHBUILD_MAX_RATIO" in shown
    assert not (work / "channel").exists() or disk_use(work / "channel") == 0


def test_a_wheel_of_countless_empty_members_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # Before: 200,000 empty members passed every limit (they unpack to 0 bytes), each a file made on the disk.
    wheel = make_wheel(tmp_path / "in", WHEEL, {"torch/__init__.py": b"__version__ = '2.13.0+cpu'\n"})
    many = 100_001  # one past the default limit
    with zipfile.ZipFile(wheel, "a") as archive:
        for number in range(many):
            archive.writestr(f"torch/empty/{number}", b"")
    work = tmp_path / "work"
    work.mkdir()
    result = pipeline([*RUN, "--wheel", str(wheel), "--cache-dir", "build/cache"], work)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr
    assert " ".join(result.stderr.split()) == (
        f"error: {wheel} holds {many + 4:,} members, more than the limit of 100,000: refused (each member is a file "
        "made); nothing was unpacked. If the archive is genuine, raise the limit with TORCHBUILD_MAX_MEMBERS (e.g. "
        "TORCHBUILD_MAX_MEMBERS=200000)."
    )
    assert disk_use(work) < 1 << 20


def test_a_conda_package_of_too_many_members_is_refused_from_its_tar_headers(tmp_path: Path) -> None:
    files = {f"lib/empty/{number}": b"" for number in range(12)}
    package = assemble_small(tmp_path / "made", files, name="pytorch", version="2.13.0", build="py3.11_cpu_0")
    result = pipeline(["publish", str(package), "--channel", "channel"], tmp_path, TORCHBUILD_MAX_MEMBERS="10")
    shown = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "Traceback" not in shown, shown
    assert f"{package} holds more than 10 members, more than the limit of 10: refused" in shown, shown
    assert not (tmp_path / "channel").exists() or disk_use(tmp_path / "channel") == 0


@pytest.mark.parametrize("tar_bz2", [False, True], ids=["conda", "tar.bz2"])
def test_info_files_read_the_package_through_the_checked_reader(
    tmp_path: Path, tar_bz2: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: info_files.py opened the package with zipfile and tarfile directly, past these limits.
    package = assemble_small(tmp_path / "made", {"lib/a.txt": b"a"}, name="pytorch", version="2.13.0",
                             build="py3.11_cpu_0", tar_bz2=tar_bz2)  # fmt: skip
    before = package.read_bytes()
    (tmp_path / "LICENSE").write_text("MIT\n")
    monkeypatch.setenv("TORCHBUILD_MAX_MEMBERS", "2")  # the info tar holds index.json, paths.json, about.json, ...
    with pytest.raises(UserError, match=re.escape(str(package)) + r" holds (more than )?\d+ members, more than the "
                       "limit of 2: refused"):  # fmt: skip
        info_files.add(package, {"licenses/LICENSE": tmp_path / "LICENSE"}, level=3)
    assert package.read_bytes() == before and not list(package.parent.glob("*.part"))


@pytest.mark.skipif(not REAL_TORCH.is_file(), reason=f"skipped: no {REAL_TORCH}")
def test_the_default_limits_admit_a_real_torch_wheel() -> None:
    """torch 2.13.0 cpu: 667 MiB from 181 MiB (3.7 times), its worst member of 1 MiB or more 24 times."""
    with archives.open_zip(REAL_TORCH) as archive:
        assert len(archive.infolist()) > 10_000


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TORCHBUILD_MAX_UNPACKED", "lots", "TORCHBUILD_MAX_UNPACKED='lots' is not a size: give one such as 12GiB"),
        ("TORCHBUILD_MAX_RATIO", "0.5", "TORCHBUILD_MAX_RATIO='0.5': give a number of 1 or more"),
        ("TORCHBUILD_MAX_MEMBERS", "many", "TORCHBUILD_MAX_MEMBERS='many': give a whole number of 1 or more"),
    ],
)
def test_a_bad_limit_is_refused_before_anything_runs(variable: str, value: str, message: str, tmp_path: Path) -> None:
    result = pipeline(["plan", *RUN], tmp_path, **{variable: value})
    assert result.returncode == 2 and message in " ".join(result.stderr.split()), result.stderr
