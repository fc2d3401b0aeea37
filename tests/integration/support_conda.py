"""Helpers for the conda/verify tests: small real wheels and packages made in tmp, and a way to tamper with a
package's members afterwards (what a corrupted upload or a hand-edited archive looks like)."""

from __future__ import annotations

import bz2
import datetime
import io
import sys
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.builders import make_wheel, with_sbom
from torchbuild.plan import Plan

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

ROOT = Path(__file__).resolve().parents[2]
FIXED_TIME = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)


def tiny_torch_wheel(directory: Path, plan: Plan, requires: Sequence[str] = ()) -> Path:
    """A small wheel with the Plan's torch wheel name: torch/__init__.py, a console script, Requires-Dist, and the
    SBOM the repair stage adds."""
    files = {
        "torch/__init__.py": f"__version__ = '{plan.version}'\n".encode(),
        "torch/distributed/run.py": b"def main():\n    return 0\n",
    }
    wheel = make_wheel(
        directory,
        plan.root.wheel,
        files,
        requires=requires,
        entry_points="[console_scripts]\ntorchrun = torch.distributed.run:main\n",
    )
    return with_sbom(wheel)


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
