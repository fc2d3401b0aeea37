"""Build dependencies: declared per cell, downloaded over real HTTP (a local server) with retries, verified by sha256,
unpacked safely (.zip, .7z, .tar.gz) and cached by hash."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import py7zr
import pytest

from torchbuild.host import downloads
from torchbuild.knowledge import build_deps
from torchbuild.knowledge.build_deps import Dependency, DependencyError


class Server:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.fail_first: dict[str, int] = {}  # path -> how many 503s before serving
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                if outer.fail_first.get(self.path, 0) > 0:
                    outer.fail_first[self.path] -= 1
                    self.send_error(503)
                    return
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.httpd.shutdown()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def dep_for(server: Server, name: str, data: bytes, **kwargs: object) -> Dependency:
    server.files[f"/{name}"] = data
    return Dependency(name=name.split(".")[0], url=f"{server.url}/{name}", sha256=hashlib.sha256(data).hexdigest(),
                      **kwargs)  # type: ignore[arg-type]


def test_declared_per_cell() -> None:
    win = build_deps.declared("win-64", "2.5.1", "12.4")
    assert [d.name for d in win] == ["mkl-include", "mkl-static"]
    assert all(len(d.sha256) == 64 and d.url.startswith("https://") for d in win)
    assert build_deps.declared("linux-64", "2.5.1", "cpu") == ()


def test_fetch_zip_with_root_and_env(server: Server, tmp_path: Path) -> None:
    data = zip_bytes({"pkg.data/data/Library/include/mkl.h": b"/* mkl */\n", "pkg.data/data/Library/lib/mkl.lib": b"x"})
    dep = dep_for(server, "mkl.zip", data, root="pkg.data/data/Library",
                  env={"LIB": "{root}/lib;%LIB%", "CMAKE_INCLUDE_PATH": "{root}/include"})
    root = downloads.fetch(dep, tmp_path / "cache", show_progress=False)
    assert (root / "include" / "mkl.h").read_bytes() == b"/* mkl */\n"
    env = downloads.environment(dep, root, {"lib": "C:\\VS\\lib\\x64"})  # cmd.exe names are case-insensitive
    assert env == {"LIB": f"{root}/lib;C:\\VS\\lib\\x64", "CMAKE_INCLUDE_PATH": f"{root}/include"}
    assert str(root).startswith(str(tmp_path / "cache" / "deps" / dep.sha256))
    hits = len(server.hits)
    assert downloads.fetch(dep, tmp_path / "cache", show_progress=False) == root  # cached: no request
    assert len(server.hits) == hits


def test_fetch_7z_and_tar(server: Server, tmp_path: Path) -> None:
    seven = tmp_path / "magma.7z"
    (tmp_path / "src" / "magma" / "include").mkdir(parents=True)
    (tmp_path / "src" / "magma" / "include" / "magma.h").write_text("/* magma */\n")
    with py7zr.SevenZipFile(seven, "w") as archive:
        archive.writeall(tmp_path / "src" / "magma", "magma")
    magma = dep_for(server, "magma.7z", seven.read_bytes(), root="magma")
    root = downloads.fetch(magma, tmp_path / "c", show_progress=False)
    assert (root / "include" / "magma.h").read_text() == "/* magma */\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("lib/libx.a")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    root = downloads.fetch(dep_for(server, "x.tar.gz", buffer.getvalue()), tmp_path / "c", show_progress=False)
    assert (root / "lib" / "libx.a").read_bytes() == b"abc"


def test_checksum_mismatch_unpacks_nothing(server: Server, tmp_path: Path) -> None:
    dep = dep_for(server, "mkl.zip", zip_bytes({"a.h": b"1"}))
    server.files["/mkl.zip"] = zip_bytes({"a.h": b"tampered"})
    with pytest.raises(DependencyError) as err:
        downloads.fetch(dep, tmp_path / "cache", show_progress=False)
    assert "checksum mismatch" in str(err.value) and dep.sha256 in str(err.value)
    assert "build_deps.yaml" in str(err.value)
    assert not list((tmp_path / "cache").rglob("a.h")) and not list((tmp_path / "cache").rglob("*.zip"))


def test_retries_transient_errors(server: Server, tmp_path: Path) -> None:
    dep = dep_for(server, "flaky.zip", zip_bytes({"ok.txt": b"ok"}))
    server.fail_first["/flaky.zip"] = 1
    root = downloads.fetch(dep, tmp_path / "cache", show_progress=False)
    assert (root / "ok.txt").read_bytes() == b"ok" and server.hits.count("/flaky.zip") == 2


def test_missing_file_is_not_retried(server: Server, tmp_path: Path) -> None:
    dep = Dependency(name="gone", url=f"{server.url}/gone.zip", sha256="0" * 64)
    with pytest.raises(DependencyError, match="failed after 1 attempt"):
        downloads.fetch(dep, tmp_path / "cache", show_progress=False)


@pytest.mark.parametrize("kind", ["zip", "tar-dotdot", "tar-symlink", "tar-hardlink", "7z"])
def test_path_escapes_are_refused(kind: str, server: Server, tmp_path: Path) -> None:
    if kind == "zip":
        data, name = zip_bytes({"ok.txt": b"1", "../evil.txt": b"x"}), "e.zip"
    elif kind == "7z":
        (tmp_path / "evil.txt").write_text("x")
        out = tmp_path / "e.7z"
        with py7zr.SevenZipFile(out, "w") as archive:
            archive.write(tmp_path / "evil.txt", "../evil.txt")
        data, name = out.read_bytes(), "e.7z"
    else:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo("../evil.txt" if kind == "tar-dotdot" else "a/b/link")
            if kind == "tar-symlink":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            elif kind == "tar-hardlink":  # a hard link's target is relative to the archive root: this leaves it
                ok = tarfile.TarInfo("a/secret")
                ok.size = 1
                tar.addfile(ok, io.BytesIO(b"s"))
                info.type, info.linkname = tarfile.LNKTYPE, "../secret"
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
        data, name = buffer.getvalue(), "e.tar.gz"
    with pytest.raises(DependencyError, match=r"outside|refused"):
        downloads.fetch(dep_for(server, name, data), tmp_path / "cache", show_progress=False)
    assert not (tmp_path / "cache" / "deps" / "evil.txt").exists()
    assert not list((tmp_path / "cache").rglob("evil.txt"))
    assert not list((tmp_path / "cache").rglob("secret")), "nothing of a refused archive is unpacked"


def test_bad_declarations() -> None:
    with pytest.raises(DependencyError, match="lacks sha256"):
        build_deps.parse({"dependencies": [{"name": "mkl", "url": "https://x/mkl.7z"}]}, "build_deps.yaml")
    with pytest.raises(DependencyError, match="64 lowercase hex"):
        build_deps.parse(
            {"dependencies": [{"name": "mkl", "url": "https://x/mkl.7z", "sha256": "abc"}]}, "build_deps.yaml"
        )


@pytest.mark.parametrize("url2pathname", ["this host's", "nturl2path's (what urllib.request uses on Windows)"])
def test_filename_is_the_last_part_of_the_urls_path_on_every_host(
    url2pathname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found under Wine: `plan` on Windows named mkl-include's file 'S:\\files.pythonhosted.org\\packages\\...'."""
    if url2pathname.startswith("nturl2path"):
        import nturl2path
        import urllib.request

        monkeypatch.setattr(urllib.request, "url2pathname", nturl2path.url2pathname)
    url = "https://files.pythonhosted.org/packages/5b/f9/abc/mkl_include-2024.2.0%2Bx-py2.py3-none-win_amd64.whl?x=1#h"
    dep = Dependency(name="mkl-include", url=url, sha256="0" * 64)
    assert dep.filename == "mkl_include-2024.2.0+x-py2.py3-none-win_amd64.whl"
