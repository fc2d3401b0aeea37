"""Builders and fixtures for the source/repair/ELF tests: real ELF files compiled with gcc, small real wheels, the
real torch wheel, and a real HTTP package index (PEP 503 + PEP 658) served from a thread."""

from __future__ import annotations

import hashlib
import html
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.builders import make_wheel

ROOT = Path(__file__).resolve().parents[2]


def need_gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("skipped: gcc is not installed (needed to build real ELF test files)")
    return gcc


# --- ELF files -------------------------------------------------------------------------------------------


def build_so(
    out: Path,
    *,
    soname: str | None = None,
    needs: Sequence[Path] = (),
    runpath: Sequence[str] = (),
    code: str = "int f(void) { return 1; }\n",
    executable: bool = False,
    libs: Sequence[str] = (),
) -> Path:
    """Compile a real shared object (or executable) with a DT_NEEDED for each library in ``needs`` (linked by path;
    give them a SONAME) and each system library in ``libs`` (e.g. "m")."""
    gcc = need_gcc()
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name.replace(".", "_") + ".c")
    src.write_text(code + ("int main(void) { return 0; }\n" if executable and "main(" not in code else ""))
    argv = [gcc, "-o", str(out), str(src), "-Wl,--no-as-needed"]
    if not executable:
        argv[1:1] = ["-shared", "-fPIC"]
    if soname:
        argv.append(f"-Wl,-soname,{soname}")
    if runpath:
        argv.append(f"-Wl,--enable-new-dtags,-rpath,{':'.join(runpath)}")
    argv += [str(lib) for lib in needs]
    argv += [f"-l{lib}" for lib in libs]
    subprocess.run(argv, check=True, capture_output=True)
    src.unlink()
    return out


# --- wheels ----------------------------------------------------------------------------------------------


def wheel_from_tree(directory: Path, filename: str, tree: Path) -> Path:
    """A wheel whose payload is every file under ``tree`` (ELF files keep their bytes)."""
    files = {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}
    return make_wheel(directory, filename, files)


# --- a real package index over HTTP ----------------------------------------------------------------------


@dataclass
class Index:
    """A PEP 503 simple index with PEP 658 metadata files, served on 127.0.0.1; counts GETs per file."""

    root: Path
    url: str = ""
    gets: dict[str, int] = field(default_factory=dict)

    def count(self, suffix: str) -> int:
        return sum(n for path, n in self.gets.items() if path.endswith(suffix))

    def add(self, wheel: Path) -> None:
        """Publish ``wheel`` (linked, not copied) with its sha256 and its METADATA beside it, as PyPI does."""
        project = self.root / "simple" / "torch"
        project.mkdir(parents=True, exist_ok=True)
        target = project / wheel.name
        target.unlink(missing_ok=True)
        target.symlink_to(wheel.resolve())
        with zipfile.ZipFile(wheel) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            data = archive.read(meta)
        (project / f"{wheel.name}.metadata").write_bytes(data)
        self._write_page(project)

    def _write_page(self, project: Path) -> None:
        links = []
        for whl in sorted(project.glob("*.whl")):
            sha = hashlib.sha256(whl.read_bytes()).hexdigest()
            meta = hashlib.sha256((project / f"{whl.name}.metadata").read_bytes()).hexdigest()
            href = html.escape(f"{whl.name}#sha256={sha}")
            links.append(
                f'<a href="{href}" data-dist-info-metadata="sha256={meta}" '
                f'data-core-metadata="sha256={meta}">{html.escape(whl.name)}</a><br/>'
            )
        (project / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@pytest.fixture
def http_index(tmp_path: Path) -> Iterator[Index]:
    index = Index(root=tmp_path / "index")
    (index.root / "simple").mkdir(parents=True)

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            index.gets[self.path] = index.gets.get(self.path, 0) + 1
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(index.root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    index.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()


def use_only_index(monkeypatch: pytest.MonkeyPatch, index: Index) -> None:
    """Make pip see only ``index``: no pip.conf files, no find-links, no other index."""
    import os

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
