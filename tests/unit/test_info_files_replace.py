"""info/ files are added to a conda package by writing a new file beside it that then replaces it. On Windows a file
that is open cannot be replaced ("[WinError 5] Access denied: '...conda.part' -> '...conda'", the conda stage of
the win-64 CPU cell under Wine): the package must be closed by then. Linux allows the replace, so the test looks at
this process's open files (/proc/self/fd) at the moment of the replace, as Windows would."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.integration.support_conda import assemble_small
from torchbuild.conda import info_files

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="skipped: reads the open files from /proc")


def _open_files() -> set[Path]:
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(Path(os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:
            continue
    return found


def test_the_package_is_closed_when_the_new_file_replaces_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = assemble_small(tmp_path, {"Lib/site-packages/tinypkg/__init__.py": b""}, subdir="win-64")
    license_file = tmp_path / "LICENSE"
    license_file.write_text("MIT\n")
    replace = os.replace
    open_at_replace: list[set[Path]] = []

    def windows_like_replace(src: str | Path, dst: str | Path) -> None:
        open_at_replace.append({p for p in _open_files() if p in (Path(src).resolve(), Path(dst).resolve())})
        replace(src, dst)

    monkeypatch.setattr(os, "replace", windows_like_replace)
    info_files.add(pkg, {"licenses/LICENSE": license_file}, level=3)
    assert open_at_replace == [set()], f"open while replaced (Windows: Access denied): {open_at_replace}"
    with zipfile.ZipFile(pkg) as done:
        info = zstd.decompress(done.read(f"info-{pkg.name.removesuffix('.conda')}.tar.zst"))
    with tarfile.open(fileobj=io.BytesIO(info)) as tar:
        assert "info/licenses/LICENSE" in tar.getnames()
