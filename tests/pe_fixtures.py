"""Real PE files for the closure-check tests, built with mingw-w64 from the sources in tests/fixtures/pe/.

GNU ld (binutils 2.40) links dlltool's delay-import library into the DLL (the descriptor, the IAT and the
__delayLoadHelper2 thunk are all there and work at run time) but leaves the optional header's DELAY_IMPORT data
directory empty, which MSVC's link.exe fills in. ``_fill_delay_directory`` writes that one header field the way
link.exe does, from the descriptor's address in the DLL's own symbol table, so that the fixture has what the
delay-loading DLLs in real wheels have.

Where mingw-w64 cannot run (python.exe under Wine: the Linux compilers are not Windows programs), ``build`` copies
the fixtures from the folder $TORCHBUILD_PE_FIXTURES names, which ``compile_all`` filled on the Linux side
(scripts/wine_host.py pytest does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pefile
import pytest

SOURCES = Path(__file__).parent / "fixtures" / "pe"
GCC64 = "x86_64-w64-mingw32-gcc"
GCC32 = "i686-w64-mingw32-gcc"
DLLTOOL = "x86_64-w64-mingw32-dlltool"
NM = "x86_64-w64-mingw32-nm"
DELAY_IMPORT = 13  # IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT
DELAY_DESCRIPTOR_SIZE = 32
PREBUILT = "TORCHBUILD_PE_FIXTURES"  # a folder compile_all filled elsewhere, used where mingw-w64 is missing


@dataclass(frozen=True)
class PeFixtures:
    base: Path  # base.dll, AMD64
    lazy: Path  # lazy.dll
    user: Path  # user.dll: imports base.dll and nothere.dll, delay-loads lazy.dll
    ext: Path  # ext.pyd: imports python311.dll and MSVCP140.dll
    ext310: Path  # ext.pyd built against python310.dll
    tool: Path  # tool.exe: imports base.dll
    base32: Path  # base.dll built for I386
    cuda: Path  # cuda.dll: imports cudart64_12.dll (CUDA runtime) and nvcuda.dll (driver)
    old: Path  # old.dll: exports foo
    newer: Path  # newer.dll: imports foo and bar from old.dll (bar is missing there)


def _run(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")


def _implib(definition: Path, dll: str, out: str, cwd: Path, delay: bool = False) -> None:
    """An import library for ``dll`` (any name) from a .def file; ``delay``: a delay-load one."""
    kind = "--output-delaylib" if delay else "--output-lib"
    _run([DLLTOOL, "--input-def", str(definition), "--dllname", dll, kind, out], cwd)


def _fill_delay_directory(dll: Path, symbol: str) -> None:
    out = subprocess.run([NM, str(dll)], capture_output=True, text=True, check=True).stdout
    address = next(int(line.split()[0], 16) for line in out.splitlines() if line.endswith(" " + symbol))
    pe = pefile.PE(str(dll))
    entry = pe.OPTIONAL_HEADER.DATA_DIRECTORY[DELAY_IMPORT]
    entry.VirtualAddress = address - pe.OPTIONAL_HEADER.ImageBase
    entry.Size = DELAY_DESCRIPTOR_SIZE
    data = pe.write()
    pe.close()
    dll.write_bytes(bytes(data))


def build(dest: Path) -> PeFixtures:
    """Build every fixture into ``dest`` (seconds), or copy them from $TORCHBUILD_PE_FIXTURES where mingw-w64 is
    missing. Skips the test when neither is there."""
    missing = missing_tools()
    prebuilt = os.environ.get(PREBUILT)
    if missing and prebuilt:
        shutil.copytree(prebuilt, dest, dirs_exist_ok=True)
        return fixtures_in(dest)
    if missing:
        tools = ", ".join(missing)
        pytest.skip(f"skipped: mingw-w64 is not installed ({tools} not on PATH; apt-get install mingw-w64)")
    compile_all(dest)
    return fixtures_in(dest)


def missing_tools() -> list[str]:
    return [tool for tool in (GCC64, GCC32, DLLTOOL, NM) if shutil.which(tool) is None]


def compile_all(dest: Path) -> None:
    """Every fixture, compiled with mingw-w64 into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    names = ("base.c", "lazy.c", "user.c", "ext.c", "main.c", "cuda.c", "old.c", "newer.c")
    src = {name: str(SOURCES / name) for name in names}
    _run([GCC64, "-shared", "-o", "base.dll", src["base.c"], "-Wl,--out-implib,libbase.a"], dest)
    _run([GCC64, "-shared", "-o", "lazy.dll", src["lazy.c"]], dest)
    _implib(SOURCES / "missing.def", "nothere.dll", "libmissing.a", dest)
    _implib(SOURCES / "lazy.def", "lazy.dll", "liblazy.a", dest, delay=True)
    user = [GCC64, "-shared", "-DWITH_MISSING", "-DWITH_LAZY", "-o", "user.dll", src["user.c"], "-L."]
    _run([*user, "-lbase", "-lmissing", "-llazy"], dest)
    _fill_delay_directory(dest / "user.dll", "__DELAY_IMPORT_DESCRIPTOR_liblazy_a")
    _implib(SOURCES / "msvcp.def", "MSVCP140.dll", "libmsvcp.a", dest)
    for py in ("311", "310"):
        (dest / f"python{py}.def").write_text(f"LIBRARY python{py}.dll\nEXPORTS\nPyFunc\n", encoding="ascii")
        _implib(dest / f"python{py}.def", f"python{py}.dll", f"libpy{py}.a", dest)
        out = dest / f"py{py}" / "ext.pyd"
        out.parent.mkdir(exist_ok=True)
        _run([GCC64, "-shared", "-o", str(out), src["ext.c"], "-L.", f"-lpy{py}", "-lmsvcp"], dest)
    _run([GCC64, "-o", "tool.exe", src["main.c"], "-L.", "-lbase"], dest)
    _implib(SOURCES / "cudart.def", "cudart64_12.dll", "libcudart.a", dest)
    _implib(SOURCES / "nvcuda.def", "nvcuda.dll", "libnvcuda.a", dest)
    _run([GCC64, "-shared", "-o", "cuda.dll", src["cuda.c"], "-L.", "-lcudart", "-lnvcuda"], dest)
    _run([GCC64, "-shared", "-o", "old.dll", src["old.c"]], dest)
    _implib(SOURCES / "old.def", "old.dll", "libold.a", dest)
    _run([GCC64, "-shared", "-o", "newer.dll", src["newer.c"], "-L.", "-lold"], dest)
    (dest / "x86").mkdir(exist_ok=True)
    _run([GCC32, "-shared", "-o", "x86/base.dll", src["base.c"]], dest)


def fixtures_in(dest: Path) -> PeFixtures:
    """The fixtures ``compile_all`` made in ``dest``; RuntimeError naming the first one that is not there."""
    fixtures = PeFixtures(
        base=dest / "base.dll",
        lazy=dest / "lazy.dll",
        user=dest / "user.dll",
        ext=dest / "py311" / "ext.pyd",
        ext310=dest / "py310" / "ext.pyd",
        tool=dest / "tool.exe",
        base32=dest / "x86" / "base.dll",
        cuda=dest / "cuda.dll",
        old=dest / "old.dll",
        newer=dest / "newer.dll",
    )
    for path in vars(fixtures).values():
        if not path.is_file():
            raise RuntimeError(f"{path} is missing: ${PREBUILT} must name a folder that compile_all filled")
    return fixtures


def with_linker(dll: Path, dest: Path, version: str) -> Path:
    """A copy of ``dll`` whose optional header says it was linked by linker ``version`` (as MSVC 14.50's link.exe
    writes 14.50): what the VC runtime floor is read from."""
    major, minor = (int(part) for part in version.split("."))
    pe = pefile.PE(str(dll))
    pe.OPTIONAL_HEADER.MajorLinkerVersion = major
    pe.OPTIONAL_HEADER.MinorLinkerVersion = minor
    data = pe.write()
    pe.close()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(bytes(data))
    return dest
