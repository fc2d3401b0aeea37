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

from torchbuild import rattler_child
from torchbuild.channels import Upload, pep503, wheel_path
from torchbuild.channels.repodata import PACKAGE_SUFFIXES
from torchbuild.checks.conda_archive import PackageUnreadable, read_package
from torchbuild.errors import UserError
from torchbuild.files import copy_atomic, write_atomic
from torchbuild.results import Artifact, sha256_of


def check_directory(path: Path) -> None:
    """A channel directory to publish into: there, or not yet made; not a file."""
    if path.exists() and not path.is_dir():
        raise UserError(f"channel {path} is not a directory: give a directory (it is made if missing).")


class LocalChannel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()

    def _packages(self) -> list[Path]:
        return sorted(p for p in self.path.glob("*/*") if p.name.endswith(PACKAGE_SUFFIXES))

    def _check_indexable(self) -> None:
        """Every package in the channel can be indexed. py-rattler's index, given one it cannot open, panics without
        naming it, after it may have rewritten other subdirs' repodata; so each is opened here first."""
        for package in self._packages():
            try:
                read_package(package, payload=False)
            except PackageUnreadable as exc:
                raise UserError(
                    f"{exc}. The channel's index was left as it was: replace or remove that file, then run "
                    f"'pipeline.py index --channel {self.path}'."
                ) from None

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        check_directory(self.path)
        self._check_indexable()  # before the first file is copied: a publish must not stop half done
        uploads: list[Upload] = []
        conflicts: list[str] = []
        wanted = [(a, "conda", subdir, self.path / subdir / a.path.name) for a, subdir in conda]
        wanted += [(a, "wheel", "whl", self.path / wheel_path(a.path.name)) for a in wheels]
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
        if not self.path.is_dir():
            what = "is not a directory" if self.path.exists() else "does not exist"
            raise UserError(f"channel {self.path} {what}: give the directory a publish wrote (e.g. --channel channel).")
        self._check_indexable()
        packages = self._packages()
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
