"""A CUDA toolkit root made from the package index, for a cell whose CUDA is not installed on this host.

CUDA 13.x only: its ``nvidia-cuda-nvcc`` wheels carry a full nvcc (Linux and Windows), the 11.x/12.x ones only
ptxas (toolchains.yaml, ``provision``). The wheels of one CUDA minor (``==13.2.*``) are fetched by pip for the
target platform and unpacked together; their common folder ``nvidia/cu13`` is the toolkit root. The result is
cached per CUDA version and platform under ``<cache>/cuda/<version>-<platform>/`` and written atomically (a
half-made root is never used).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchbuild.config import nesting
from torchbuild.host import archives, pip
from torchbuild.knowledge import compat
from torchbuild.platforms.toolchain import ToolchainError
from torchbuild.results import sha256_of

PIP_TIMEOUT_S = 900
MANIFEST = "torchbuild-toolkit.json"


@dataclass(frozen=True)
class Recipe:
    """What makes a toolkit root for one CUDA major: the wheels and the folder inside them that is the root."""

    root: str
    packages: tuple[str, ...]
    optional: tuple[str, ...]
    platform_tags: tuple[str, ...]


def recipe(cuda: str, platform: str) -> Recipe | None:
    """The recipe for CUDA X.Y on a platform; None when the package index cannot serve it (CUDA 11/12)."""
    table = compat.load().provisioning
    row = table.recipes.get(cuda.split(".")[0])
    tags = table.platform_tags.get(platform)
    if row is None or tags is None:
        return None
    return Recipe(root=row.root, packages=row.packages, optional=row.optional, platform_tags=tags)


def not_provisionable_fix(cuda: str) -> str:
    major, minor = cuda.split(".")[:2]
    fix = compat.load().provisioning.not_provisionable
    return " ".join(fix.format(cuda=cuda, dash=f"{major}-{minor}", underscore=f"{major}_{minor}").split())


def cache_root(cache_dir: Path, cuda: str, platform: str) -> Path:
    return cache_dir / "cuda" / f"{cuda}-{platform}"


def cached(cache_dir: Path, cuda: str, platform: str) -> Path | None:
    """The toolkit root of a finished earlier provisioning, or None."""
    base = cache_root(cache_dir, cuda, platform)
    if not (base / MANIFEST).is_file():
        return None
    manifest = nesting.loads((base / MANIFEST).read_text(encoding="utf-8"))
    return base / str(manifest["root"])


def manifest(cache_dir: Path, cuda: str, platform: str) -> dict[str, Any]:
    data: dict[str, Any] = nesting.loads((cache_root(cache_dir, cuda, platform) / MANIFEST).read_text(encoding="utf-8"))
    return data


def provision(cuda: str, platform: str, cache_dir: Path, log: Path | None = None) -> Path:
    """The toolkit root for CUDA ``cuda`` (X.Y) on ``platform``, provisioned now if it is not cached."""
    found = cached(cache_dir, cuda, platform)
    if found is not None:
        return found
    plan = recipe(cuda, platform)
    if plan is None:
        fix = not_provisionable_fix(cuda)
        raise ToolchainError(f"CUDA {cuda} cannot be provisioned from the package index: {fix}.")
    base = cache_root(cache_dir, cuda, platform)
    base.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{base.name}-", dir=base.parent))
    try:
        wheels_dir = staging / "wheels"
        pip_log = log or staging / "pip.log"
        _pip_download(plan.packages, cuda, plan.platform_tags, wheels_dir, pip_log)
        optional_missing = []
        for name in plan.optional:
            try:
                _pip_download([name], cuda, plan.platform_tags, wheels_dir, pip_log)
            except ToolchainError:
                optional_missing.append(name)
        wheels = sorted(wheels_dir.glob("*.whl"))
        tree = staging / "tree"
        for wheel in wheels:
            _unpack_wheel(wheel, tree)
        root = tree / plan.root
        _finish_root(root, windows=platform.startswith("win"))
        record = {
            "cuda": cuda,
            "platform": platform,
            "root": f"tree/{plan.root}",
            "wheels": {w.name: sha256_of(w) for w in wheels},
            "optional_missing": optional_missing,
        }
        (staging / MANIFEST).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        shutil.rmtree(wheels_dir)
        if base.exists():
            shutil.rmtree(base)
        os.replace(staging, base)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return base / "tree" / plan.root


def _pip_download(packages: Sequence[str], cuda: str, tags: Sequence[str], dest: Path, log: Path) -> None:
    target = ["--only-binary=:all:", *(arg for tag in tags for arg in ("--platform", tag))]
    try:
        pip.download([f"{name}=={cuda}.*" for name in packages], dest, log=log, target=target, timeout=PIP_TIMEOUT_S)
    except pip.PipError as exc:
        raise ToolchainError(
            f"the package index has no CUDA {cuda} wheels for this platform ({exc.detail}). "
            "Point pip at an index that has them (PIP_INDEX_URL), or install the toolkit."
        ) from None


def _unpack_wheel(wheel: Path, dest: Path) -> None:
    """Unpack a wheel's files (not its .dist-info), refusing members that would land outside ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    top = dest.resolve()
    with archives.open_zip(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir() or ".dist-info/" in info.filename:
                continue
            target = (dest / info.filename).resolve()
            if not target.is_relative_to(top):
                raise ToolchainError(f"{wheel.name}: member {info.filename!r} points outside the toolkit root")
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)
            mode = info.external_attr >> 16
            if mode:
                target.chmod(stat.S_IMODE(mode) | stat.S_IRUSR | stat.S_IWUSR)


def _finish_root(root: Path, windows: bool) -> None:
    """What a wheel cannot carry: executable bits (zip members often lose them), the unversioned libcudart.so a
    linker looks for, and lib64 (where CMake's FindCUDAToolkit looks on Linux)."""
    if not (root / "bin" / ("nvcc.exe" if windows else "nvcc")).is_file():
        raise ToolchainError(f"the provisioned wheels hold no nvcc under {root}/bin")
    if windows:
        return
    for folder in (root / "bin", root / "nvvm" / "bin"):
        for exe in folder.glob("*"):
            if exe.is_file() and "." not in exe.name:
                exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    lib = root / "lib"
    for versioned in lib.glob("*.so.*"):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
    if lib.is_dir() and not (root / "lib64").exists():
        (root / "lib64").symlink_to("lib")
