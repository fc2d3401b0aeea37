"""A channel in a local directory: conda subdirs indexed by py-rattler, wheels under whl/ with PEP 503 pages.

channel/
  noarch/repodata.json(.zst)         conda requires noarch even when empty
  linux-64/pytorch-*.conda, repodata.json(.zst)
  whl/simple/index.html              PEP 503 root
  whl/simple/torch/index.html        links carry #sha256=
  whl/simple/torch/torch-*.whl (+ .sha256 sidecar, so pages need not rehash)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from torchbuild import rattler_child
from torchbuild.channels import Upload, pep503
from torchbuild.errors import UserError
from torchbuild.files import copy_atomic, write_atomic
from torchbuild.results import Artifact, sha256_of


class LocalChannel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()

    def _wheel_dir(self, wheel_name: str) -> Path:
        project = canonicalize_name(parse_wheel_filename(wheel_name)[0])
        return self.path / "whl" / "simple" / project

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        uploads: list[Upload] = []
        conflicts: list[str] = []
        wanted = [(a, "conda", subdir, self.path / subdir / a.path.name) for a, subdir in conda]
        wanted += [(a, "wheel", "whl", self._wheel_dir(a.path.name) / a.path.name) for a in wheels]
        for artifact, kind, subdir, destination in wanted:
            action = "new"
            if destination.exists():
                if sha256_of(destination) == artifact.sha256:
                    action = "unchanged"
                elif replace:
                    action = "replaced"
                else:
                    conflicts.append(f"{destination} (channel sha256 differs from {artifact.path})")
                    continue
            uploads.append(
                Upload(artifact=artifact, kind=kind, subdir=subdir, destination=str(destination), action=action)  # type: ignore[arg-type]
            )
        if conflicts:
            raise UserError(
                "publish: refusing to overwrite a different file under an existing name (bump build_number in "
                "matrix.yaml to publish a new build, or pass --replace): " + "; ".join(conflicts)
            )
        return uploads

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        published = []
        for upload in uploads:
            destination = Path(upload.destination)
            if upload.action != "unchanged":
                copy_atomic(upload.artifact.path, destination)
            if upload.kind == "wheel":
                write_atomic(destination.with_name(destination.name + ".sha256"), upload.artifact.sha256 + "\n")
            published.append(Artifact(path=destination, sha256=upload.artifact.sha256, size=upload.artifact.size))
        # Index last: packages are all in place before any index names them.
        self.index()
        return published

    def index(self) -> str:
        packages = [p for p in self.path.glob("*/*") if p.name.endswith((".conda", ".tar.bz2"))]
        if packages:
            (self.path / "noarch").mkdir(parents=True, exist_ok=True)
            rattler_child.call("index", directory=str(self.path), write_zst=True)
        wheels = self.write_simple_pages()
        return f"{len(packages)} conda packages, {wheels} wheels"

    def write_simple_pages(self) -> int:
        """The PEP 503 pages, from the wheels on disk; returns how many wheels they list."""
        simple = self.path / "whl" / "simple"
        if not simple.is_dir():
            return 0
        projects = sorted(p.name for p in simple.iterdir() if p.is_dir())
        count = 0
        for project in projects:
            links = {}
            for wheel in sorted((simple / project).glob("*.whl")):
                sidecar = wheel.with_name(wheel.name + ".sha256")
                links[wheel.name] = sidecar.read_text().strip() if sidecar.is_file() else sha256_of(wheel)
            write_atomic(simple / project / "index.html", pep503.project_page(project, links))
            count += len(links)
        write_atomic(simple / "index.html", pep503.root_page(projects))
        return count
