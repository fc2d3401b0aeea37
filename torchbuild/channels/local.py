"""A channel in a local directory: conda subdirs indexed by py-rattler, wheels under whl/ with PEP 503 pages.

channel/
  noarch/repodata.json(.zst)         conda requires noarch even when empty
  linux-64/pytorch-*.conda, repodata.json(.zst)
  whl/simple/index.html              PEP 503 root
  whl/simple/torch/index.html        links carry #sha256=
  whl/simple/torch/torch-*.whl (+ .sha256 sidecar, so pages need not rehash)
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from torchbuild import rattler_child
from torchbuild.channels import Upload
from torchbuild.errors import UserError
from torchbuild.files import copy_atomic, write_atomic
from torchbuild.stages import Artifact, sha256_of


class LocalChannel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()

    def _wheel_dir(self, wheel_name: str) -> Path:
        project = canonicalize_name(parse_wheel_filename(wheel_name)[0])
        return self.path / "whl" / "simple" / project

    def plan(self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact]) -> list[Upload]:
        uploads: list[Upload] = []
        conflicts: list[str] = []
        wanted = [(a, "conda", subdir, self.path / subdir / a.path.name) for a, subdir in conda]
        wanted += [(a, "wheel", "whl", self._wheel_dir(a.path.name) / a.path.name) for a in wheels]
        for artifact, kind, subdir, destination in wanted:
            action = "new"
            if destination.exists():
                if sha256_of(destination) != artifact.sha256:
                    conflicts.append(f"{destination} (channel sha256 differs from {artifact.path})")
                    continue
                action = "unchanged"
            uploads.append(
                Upload(artifact=artifact, kind=kind, subdir=subdir, destination=str(destination), action=action)  # type: ignore[arg-type]
            )
        if conflicts:
            raise UserError(
                "publish: refusing to overwrite a different file under an existing name (bump build_number in "
                "matrix.yaml to publish a new build): " + "; ".join(conflicts)
            )
        return uploads

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        published = []
        for upload in uploads:
            destination = Path(upload.destination)
            if upload.action == "new":
                copy_atomic(upload.artifact.path, destination)
            if upload.kind == "wheel":
                write_atomic(destination.with_name(destination.name + ".sha256"), upload.artifact.sha256 + "\n")
            published.append(Artifact(path=destination, sha256=upload.artifact.sha256, size=upload.artifact.size))
        # Index last: packages are all in place before any index names them.
        self.index()
        return published

    def index(self) -> None:
        if any(p.suffix in (".conda", ".bz2") for p in self.path.glob("*/*")):
            (self.path / "noarch").mkdir(parents=True, exist_ok=True)
            rattler_child.call("index", directory=str(self.path), write_zst=True)
        self.write_simple_pages()

    def write_simple_pages(self) -> None:
        simple = self.path / "whl" / "simple"
        if not simple.is_dir():
            return
        projects = sorted(p.name for p in simple.iterdir() if p.is_dir())
        for project in projects:
            links = []
            for wheel in sorted((simple / project).glob("*.whl")):
                sidecar = wheel.with_name(wheel.name + ".sha256")
                digest = sidecar.read_text().strip() if sidecar.is_file() else sha256_of(wheel)
                name = html.escape(wheel.name)
                links.append(f'    <a href="{name}#sha256={digest}">{name}</a><br/>')
            write_atomic(simple / project / "index.html", _page(f"Links for {project}", links))
        root_links = [f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br/>' for p in projects]
        write_atomic(simple / "index.html", _page("Simple index", root_links))


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (
        '<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{title}</title></head>\n  <body>\n    <h1>{title}</h1>\n{body}\n  </body>\n</html>\n"
    )
