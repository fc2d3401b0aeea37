"""Helpers for the conda/verify tests: small real wheels and packages made in tmp, and a way to tamper with a
package's members afterwards (what a corrupted upload or a hand-edited archive looks like)."""

from __future__ import annotations

import base64
import bz2
import datetime
import hashlib
import io
import sys
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild import matrix
from torchbuild import plan as plan_mod
from torchbuild.matrix import Cell
from torchbuild.plan import Plan

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

ROOT = Path(__file__).resolve().parents[2]
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
FIXED_TIME = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


def torch_plan(platform: str = "linux-64", cuda: str = "cpu", python: str = "3.11", torch: str = "2.13.0") -> Plan:
    m = matrix.load(ROOT / "matrix.yaml")
    return plan_mod.resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), m)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    directory: Path,
    filename: str,
    files: Mapping[str, bytes],
    *,
    requires: Sequence[str] = (),
    entry_points: str = "",
    tags: Sequence[str] | None = None,
    record_overrides: Mapping[str, str] | None = None,
) -> Path:
    """A wheel with a correct RECORD (unless ``record_overrides`` replaces rows: path -> 'hash,size')."""
    name, version, *tag_parts = filename.removesuffix(".whl").split("-")
    dist_info = f"{name}-{version}.dist-info"
    tag_list = list(tags) if tags is not None else ["-".join(tag_parts)]
    members = dict(files)
    requires_lines = "".join(f"Requires-Dist: {r}\n" for r in requires)
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires_lines}"
    ).encode()
    members[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: torchbuild-tests\nRoot-Is-Purelib: false\n"
        + "".join(f"Tag: {t}\n" for t in tag_list)
    ).encode()
    if entry_points:
        members[f"{dist_info}/entry_points.txt"] = entry_points.encode()
    rows = [f"{path},{_record_hash(data)},{len(data)}" for path, data in members.items()]
    for path, value in (record_overrides or {}).items():
        rows = [r for r in rows if not r.startswith(path + ",")] + [f"{path},{value}"]
    rows.append(f"{dist_info}/RECORD,,")
    members[f"{dist_info}/RECORD"] = ("\n".join(rows) + "\n").encode()
    path = directory / filename
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return path


def tiny_torch_wheel(directory: Path, plan: Plan, requires: Sequence[str] = ()) -> Path:
    """A small wheel with the Plan's torch wheel name: torch/__init__.py, a console script, Requires-Dist."""
    files = {
        "torch/__init__.py": f"__version__ = '{plan.version}'\n".encode(),
        "torch/distributed/run.py": b"def main():\n    return 0\n",
    }
    return make_wheel(
        directory,
        plan.wheel,
        files,
        requires=requires,
        entry_points="[console_scripts]\ntorchrun = torch.distributed.run:main\n",
    )


def assemble_small(
    out_dir: Path,
    files: Mapping[str, bytes],
    *,
    name: str = "tinypkg",
    version: str = "1.0.0",
    build: str = "py311_0",
    subdir: str = "linux-64",
    depends: Sequence[str] = ("python >=3.11,<3.12.0a0",),
    tar_bz2: bool = False,
    symlinks: Mapping[str, str] | None = None,
) -> Path:
    """A real package assembled by py-rattler-build from ``files`` (relative path -> content)."""
    from rattler_build import ArchiveType, assemble_package

    staging = out_dir / f"staging-{name}-{subdir}"
    for rel, data in files.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for link, target_name in (symlinks or {}).items():
        (staging / link).parent.mkdir(parents=True, exist_ok=True)
        (staging / link).symlink_to(target_name)
    output = assemble_package(
        name=name,
        version=version,
        target_platform=subdir,
        build_string=build,
        output_dir=out_dir,
        files_dir=staging,
        depends=list(depends),
        license="MIT",
        license_family="MIT",
        archive_type=ArchiveType.TarBz2 if tar_bz2 else ArchiveType.Conda,
        timestamp=FIXED_TIME,
        compression_level=3 if not tar_bz2 else 1,
        detect_prefix=False,
    )
    return Path(output.path)


def _retar(members: Sequence[tuple[tarfile.TarInfo, bytes | None]], replace: Mapping[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if info.name in replace:
                data = replace[info.name]
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _members(stream: io.BufferedIOBase | zstd.ZstdFile | bz2.BZ2File) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    found: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            handle = tar.extractfile(info) if info.isfile() else None
            found.append((info, handle.read() if handle else None))
    return found


def repack(src: Path, dest: Path, replace: Mapping[str, bytes], *, compression: int = zipfile.ZIP_STORED) -> Path:
    """Copy the package ``src`` to ``dest`` (a new file name gives the inner .conda archives the new stem),
    with the members named in ``replace`` given new content: paths.json and index.json are not updated."""
    if src.name.endswith(".tar.bz2"):
        with bz2.open(src, "rb") as stream:
            members = _members(stream)
        dest.write_bytes(bz2.compress(_retar(members, replace)))
        return dest
    old_stem, new_stem = src.name.removesuffix(".conda"), dest.name.removesuffix(".conda")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", compression) as zout:
        for entry in zin.infolist():
            data = zin.read(entry)
            if entry.filename.endswith(".tar.zst"):
                with zstd.open(io.BytesIO(data), "rb") as stream:
                    members = _members(stream)
                data = zstd.compress(_retar(members, replace))
            zout.writestr(entry.filename.replace(old_stem, new_stem), data)
    return dest
