"""Small real artifacts for tests: wheels with a correct RECORD, and Plans of real cells."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import ROOT
from torchbuild import plan as plan_mod
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.plan import Plan
from torchbuild.results import Artifact


def torch_plan(platform: str = "linux-64", cuda: str = "cpu", python: str = "3.11", torch: str = "2.13.0") -> Plan:
    m = matrix.load(ROOT / "matrix.yaml")
    return plan_mod.resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), m)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    directory: Path,
    filename: str,
    files: Mapping[str, bytes] | None = None,
    *,
    requires: Sequence[str] = (),
    entry_points: str = "",
    tags: Sequence[str] | None = None,
    dist_info: str | None = None,
    record_overrides: Mapping[str, str] | None = None,
    extra_members: Mapping[str, bytes] | None = None,
    metadata_lines: Sequence[str] = (),
) -> Path:
    """A real wheel: ``files`` plus a .dist-info with METADATA, WHEEL (tags from the file name unless given) and
    a correct RECORD, unless ``record_overrides`` replaces rows (path -> 'hash,size'). ``extra_members`` are
    written as given, outside RECORD (e.g. a '../evil' member); ``metadata_lines`` are added to METADATA's
    headers."""
    stem = filename.removesuffix(".whl")
    name, version, *rest = stem.split("-")
    tag_list = list(tags) if tags is not None else [
        f"{i}-{a}-{p}" for i in rest[-3].split(".") for a in rest[-2].split(".") for p in rest[-1].split(".")
    ]  # fmt: skip
    dist = dist_info or f"{name}-{version}.dist-info"
    members: dict[str, bytes] = dict(files or {"torch/__init__.py": b"__version__ = 'stand-in'\n"})
    requires_lines = "".join(f"Requires-Dist: {r}\n" for r in requires) + "".join(f"{m}\n" for m in metadata_lines)
    members[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires_lines}".encode()
    members[f"{dist}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: torchbuild-tests\nRoot-Is-Purelib: false\n"
        + "".join(f"Tag: {t}\n" for t in tag_list)
        + (f"Build: {rest[0]}\n" if len(rest) == 4 else "")  # a build number in the name: name-version-build-tags
    ).encode()
    if entry_points:
        members[f"{dist}/entry_points.txt"] = entry_points.encode()
    rows = [f"{path},{record_hash(data)},{len(data)}" for path, data in members.items()]
    for path, value in (record_overrides or {}).items():
        rows = [r for r in rows if not r.startswith(path + ",")] + [f"{path},{value}"]
    rows.append(f"{dist}/RECORD,,")
    members[f"{dist}/RECORD"] = ("\n".join(rows) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in {**members, **(extra_members or {})}.items():
            info = zipfile.ZipInfo(member, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            archive.writestr(info, data)
    return path


# The torch 2.13.0 CPU wheel this machine image carries (pip finds it through PIP_FIND_LINKS).
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")


def real_torch_wheel() -> Path:
    import pytest

    if not TORCH_WHEEL.is_file():
        pytest.skip(f"skipped: the real torch 2.13.0 CPU wheel is not at {TORCH_WHEEL} on this machine")
    return TORCH_WHEEL


def source_info(directory: Path, wheel: Path, epoch: int = 1_700_000_000) -> Artifact:
    """The source stage's ``source_info`` for a wheel handed to later stages directly: where it came from, and the
    time the artifacts carry."""
    from torchbuild.results import sha256_of
    from torchbuild.wheel.provenance import SourceInfo

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "source.json"
    SourceInfo("wheel", str(wheel), sha256_of(wheel), "", epoch, "the test").write(path)
    return Artifact.of(path)


def with_sbom(wheel: Path) -> Path:
    """``wheel`` as the repair stage leaves a wheel that needs nothing vendored: with its SBOM (torch only) in the
    .dist-info and RECORD. Rewritten in place."""
    from torchbuild.wheel import sbom
    from torchbuild.wheel.provenance import SourceInfo
    from torchbuild.wheel.rewrite import dist_info_of, rewrite

    name, version = wheel.name.split("-")[:2]
    source = SourceInfo("wheel", str(wheel), "", "", 1_700_000_000, "the test")
    document = sbom.build(sbom.Subject(wheel.name, name, version, source), [], source.epoch).encode("utf-8")
    with zipfile.ZipFile(wheel) as archive:
        member = sbom.wheel_member(dist_info_of(archive))
    rewrite(wheel, wheel.with_name(wheel.name + ".sbom"), files={member: document}).replace(wheel)
    return wheel
