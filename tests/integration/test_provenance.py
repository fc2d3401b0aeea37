"""Provenance (issue 16): the SBOM every repaired wheel and conda package carries, vendor signatures checked before
a DLL is vendored, and rebuilds from the same inputs that give the same bytes, on both platforms.

The stages run on small wheels of real binaries (gcc's ELF, mingw-w64's PE) with the real providers (PyPI's
msvc-runtime, intel-openmp and nvidia-cuda-runtime-cu12 wheels); the real torch win_amd64 wheel is in
test_runtimes.py."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.integration.support_source_repair import build_so, wheel_from_tree
from tests.pe_fixtures import PeFixtures
from torchbuild.conda.checks.package import check_package
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.host import scratch
from torchbuild.knowledge import dll_providers
from torchbuild.plan import Plan
from torchbuild.platforms.windows import authenticode
from torchbuild.platforms.windows import providers as provider_dlls
from torchbuild.results import Artifact, sha256_of
from torchbuild.stages import Context
from torchbuild.stages.conda import stage
from torchbuild.stages.repair import stage as repair
from torchbuild.stages.repair import windows
from torchbuild.wheel import sbom
from torchbuild.wheel.checks import check_wheel
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.rewrite import rewrite

pytestmark = pytest.mark.slow
EPOCH = 1_700_000_000


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def sha256_of_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source_info(directory: Path, wheel: Path) -> Artifact:
    path = directory / "source.json"
    SourceInfo("wheel", str(wheel), sha256_of(wheel), "", EPOCH, "the test").write(path)
    return Artifact.of(path)


def _repair_and_package(plan: Plan, wheel: Path, root: Path) -> tuple[Path, Path]:
    """The repair and conda stages in ``root`` on a copy of ``wheel`` made there (its own time on disk)."""
    root.mkdir(parents=True)
    given = shutil.copy(wheel, root / wheel.name)
    info = _source_info(root, wheel)  # where it came from: the same for both builds
    inputs = {"built_wheel": Artifact.of(Path(given)), "source_info": info}
    options = RunOptions(compression_level=1)
    repaired = repair.run(Context(plan=plan, root=root, options=options, inputs=inputs))
    inputs = {**repaired.outputs, "source_info": info}
    packaged = stage.run(Context(plan=plan, root=root, options=options, inputs=inputs))
    return repaired.outputs["repaired_wheel"].path, packaged.outputs["conda_package"].path


def _document(wheel: Path) -> tuple[str, dict[str, bytes]]:
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith(f"/sboms/{sbom.FILE_NAME}"))
        return archive.read(member).decode("utf-8"), {n: archive.read(n) for n in archive.namelist()}


def _twice(plan: Plan, wheel: Path, tmp_path: Path) -> tuple[tuple[Path, Path], tuple[Path, Path]]:
    first = _repair_and_package(plan, wheel, tmp_path / "first")  # payload unpacked in memory where there is room
    os.umask(0o077)  # another machine's umask, another directory, another time on disk
    os.environ[scratch.SETTING] = "disk"  # and the payload unpacked on disk
    try:
        second = _repair_and_package(plan, wheel, tmp_path / "second" / "deeper")
    finally:
        del os.environ[scratch.SETTING]
    return first, second


def test_a_win_64_rebuild_is_byte_identical_and_its_sbom_names_each_vendored_dll(
    pe_fixtures: PeFixtures, tmp_path: Path, umask: None
) -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    wheel = make_wheel(tmp_path / "in", plan.root.wheel, {"torch/__init__.py": b"", "torch/_C.cp311-win_amd64.pyd":
                                                     pe_fixtures.ext.read_bytes()})  # fmt: skip
    (wheel_a, conda_a), (wheel_b, conda_b) = _twice(plan, wheel, tmp_path)
    assert sha256_of(wheel_a) == sha256_of(wheel_b)
    assert sha256_of(conda_a) == sha256_of(conda_b)

    text, members = _document(wheel_a)
    assert sbom.schema_problem(text) is None
    rows = {row.component: row for row in sbom.rows(json.loads(text))}
    dll = rows["torch.libs/msvcp140.dll"]
    assert dll.sha256 == sha256_of_bytes(members["torch.libs/msvcp140.dll"])
    assert dll.origin.startswith("pkg:pypi/msvc-runtime@14.44.35112")
    assert "Microsoft Corporation" in dll.signer and dll.version.startswith("14.")
    assert rows["torch"].version == "2.5.1+cpu" and rows["torch"].sha256 == sha256_of(wheel)
    assert {c.code: c.status for c in check_wheel(wheel_a, plan.root.wheel)}["TB206"] == "passed"
    # The conda package leaves the VC runtime to vc14_runtime: its SBOM lists what it holds, which is none of it.
    package = {c.code: c for c in check_package(conda_a)}
    assert package["TB109"].status == "passed", package["TB109"].message


def test_a_linux_64_rebuild_is_byte_identical_and_its_sbom_names_the_grafted_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: None
) -> None:
    plan = torch_plan()
    outside = tmp_path / "outside"
    foo = build_so(outside / "libfoo.so.1", soname="libfoo.so.1")
    tree = tmp_path / "tree"
    build_so(tree / "torch/_C.cpython-311-x86_64-linux-gnu.so", needs=[foo], code="void PyInit__C(void) {}\n")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(outside))
    wheel = wheel_from_tree(tmp_path / "in", plan.root.wheel, tree)
    (wheel_a, conda_a), (wheel_b, conda_b) = _twice(plan, wheel, tmp_path)
    assert sha256_of(wheel_a) == sha256_of(wheel_b)
    assert sha256_of(conda_a) == sha256_of(conda_b)

    text, members = _document(wheel_a)
    assert sbom.schema_problem(text) is None
    (grafted,) = [row for row in sbom.rows(json.loads(text)) if row.is_file]
    assert grafted.component.startswith("torch.libs/libfoo") and grafted.origin.endswith(f"({foo})")
    assert grafted.sha256 == sha256_of_bytes(members[grafted.component])
    assert {c.code: c.status for c in check_package(conda_a)}["TB109"] == "passed"


def test_an_sbom_that_does_not_match_the_wheel_fails_verify(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    wheel = make_wheel(tmp_path / "in", plan.root.wheel, {"torch/__init__.py": b"", "torch/_C.cp311-win_amd64.pyd":
                                                     pe_fixtures.ext.read_bytes()})  # fmt: skip
    repaired, _ = _repair_and_package(plan, wheel, tmp_path / "run")
    text, members = _document(repaired)
    member = next(n for n in members if n.endswith(sbom.FILE_NAME))
    lied = text.replace(sha256_of_bytes(members["torch.libs/msvcp140.dll"]), "0" * 64)
    (tmp_path / "bad").mkdir()
    bad = rewrite(repaired, tmp_path / "bad" / repaired.name, files={member: lied.encode()})
    check = {c.code: c for c in check_wheel(bad, plan.root.wheel)}["TB206"]
    assert check.status == "failed"
    assert "torch.libs/msvcp140.dll: sha256" in check.message
    assert "torchbuild.cdx.json says 000000000000" in check.message


# --- signatures ------------------------------------------------------------------------------------------


def _located(names: list[str], tmp_path: Path, cuda: str = "cpu") -> list[provider_dlls.Located]:
    return provider_dlls.locate(
        names, dll_providers.load(), cuda=cuda, cudnn=None, python="3.11", cache_dir=RunOptions().cache_dir,
        log=tmp_path / "pip.log",
    )


def test_a_tampered_vc_runtime_dll_is_refused_naming_what_was_found_and_expected(tmp_path: Path) -> None:
    (real,) = _located(["msvcp140.dll"], tmp_path)
    assert "Microsoft Corporation" in windows.signer_of(real)
    data = bytearray(real.path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of code changed; the signature still claims Microsoft
    tampered = tmp_path / "tampered" / "msvcp140.dll"
    tampered.parent.mkdir()
    tampered.write_bytes(bytes(data))
    with pytest.raises(StageFailed) as caught:
        windows.signer_of(provider_dlls.Located(real.pattern, tampered, real.provider, real.origin,
                                                       real.wheel, real.signer))  # fmt: skip
    message = str(caught.value)
    assert str(tampered) in message and "InvalidDigest" in message
    assert "expected a valid signature by Microsoft Corporation" in message


def test_signatures_verified_by_stages_beside_each_other_all_pass(tmp_path: Path) -> None:
    # the smoke stages run beside each other in threads, and each verifies its embeddable CPython's signature: four
    # at once failed two or three of them ("No field numbered 1 is present in this asn1crypto.x509...")
    (real,) = _located(["msvcp140.dll"], tmp_path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        said = list(pool.map(lambda _: windows.signer_of(real), range(4)))
    assert all("Microsoft Corporation" in signer for signer in said), said


def test_a_dll_changed_after_it_verified_is_verified_again(tmp_path: Path) -> None:
    # what a file verified to is kept for the run by the file's identity: a change in place is seen
    (real,) = _located(["msvcp140.dll"], tmp_path)
    copy = tmp_path / "msvcp140.dll"
    shutil.copyfile(real.path, copy)
    assert authenticode.check_vendor(copy, "Microsoft Corporation").organization == "Microsoft Corporation"
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with copy.open("r+b") as handle:  # the same file, the same size, one byte of code changed
        handle.write(bytes(data))
    with pytest.raises(authenticode.SignatureError, match="InvalidDigest"):
        authenticode.check_vendor(copy, "Microsoft Corporation")


def test_runs_fetching_one_provider_at_once_each_get_its_dlls(tmp_path: Path) -> None:
    # two runs on an empty cache fetch the VC runtime's wheel at once; before, one replaced the cache entry while the
    # other listed it, and that one found no msvcp140.dll
    def fetch(cache: Path, n: int) -> list[str]:
        hits = provider_dlls.locate(["msvcp140.dll"], dll_providers.load(), cuda="cpu", cudnn=None, python="3.11",
                                    cache_dir=cache, log=tmp_path / f"pip-{n}.log")  # fmt: skip
        return [hit.path.name for hit in hits if hit.path.is_file()]

    for round_ in range(3):  # one round hit the window in about one of three tries
        cache = tmp_path / f"cache-{round_}"
        with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
            found = list(pool.map(lambda n: fetch(cache, n), range(3)))  # noqa: B023
        assert found == [["msvcp140.dll"]] * 3
        assert len([p for p in (cache / "dll-providers").iterdir() if not p.name.startswith(".")]) == 1


def test_a_dll_signed_by_another_vendor_is_refused(tmp_path: Path) -> None:
    (intel,) = _located(["libiomp5md.dll"], tmp_path)
    (vc,) = _located(["msvcp140.dll"], tmp_path)
    wrong = provider_dlls.Located("msvcp140.dll", intel.path, vc.provider, vc.origin, vc.wheel, vc.signer)
    with pytest.raises(StageFailed) as caught:
        windows.signer_of(wrong)
    message = str(caught.value)
    assert "libiomp5md.dll is signed by Intel Corporation (Intel Corporation; root " in message
    assert "not by Microsoft Corporation" in message


def test_an_unsigned_dll_passes_only_where_the_data_says_why(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    (cudart,) = _located(["cudart64_12.dll"], tmp_path, cuda="12.4")
    assert windows.signer_of(cudart).startswith("not signed (NVIDIA's -cu11/-cu12 wheels carry")
    (vc,) = _located(["msvcp140.dll"], tmp_path)
    unsigned = provider_dlls.Located("msvcp140.dll", pe_fixtures.base, vc.provider, vc.origin, vc.wheel, vc.signer)
    with pytest.raises(StageFailed, match=r"base\.dll: NotSigned: .*expected a valid signature by Microsoft"):
        windows.signer_of(unsigned)
