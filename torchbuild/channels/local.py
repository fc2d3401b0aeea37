"""A channel in a local directory: conda subdirs indexed by py-rattler, wheels under whl/ with PEP 503 pages.

channel/
  noarch/repodata.json(.zst)         conda requires noarch even when empty
  linux-64/pytorch-*.conda, repodata.json(.zst)
  whl/simple/index.html              PEP 503 root
  whl/simple/torch/index.html        links carry #sha256=
  whl/simple/torch/torch-*.whl (+ .sha256 sidecar, so pages need not rehash)

A file already in the channel is the same as an artifact when its recorded sha256 (the subdir's repodata.json, the
wheel's sidecar) is the artifact's and the file has not changed since that record was written (size, and its
change time not after the record's); otherwise it is hashed. A publish that writes nothing leaves an index that is
current as it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from torchbuild.channels import Upload, action_for, pep503, refuse, wheel_path
from torchbuild.channels.repodata import PACKAGE_SUFFIXES
from torchbuild.conda import rattler_child
from torchbuild.conda.archive import PackageUnreadable, read_package
from torchbuild.errors import UserError
from torchbuild.host.files import changed_at, copy_atomic, write_atomic
from torchbuild.results import Artifact, sha256_of


def _recorded(repodata: Path) -> dict[str, dict[str, object]]:
    """The records of a subdir's repodata.json by file name; empty when it is missing or unreadable."""
    try:
        raw = json.loads(repodata.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {name: r for key in ("packages", "packages.conda") for name, r in (raw.get(key) or {}).items()}


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

            def same(artifact: Artifact = artifact, kind: str = kind, destination: Path = destination) -> bool:
                known = self._known_same(artifact, kind, destination)
                return known or sha256_of(destination) == artifact.sha256

            action = action_for(destination.exists(), same, replace)
            if action is None:
                conflicts.append(f"{destination} (channel sha256 differs from {artifact.path})")
                continue
            uploads.append(
                Upload(artifact=artifact, kind=kind, subdir=subdir, destination=str(destination), action=action)  # type: ignore[arg-type]
            )
        if conflicts:
            raise refuse(conflicts)
        return uploads

    def _known_same(self, artifact: Artifact, kind: str, destination: Path) -> bool:
        """The channel's record says ``destination`` is ``artifact`` and the file has not changed since."""
        if kind == "wheel":
            record = destination.with_name(destination.name + ".sha256")
            try:
                recorded = record.read_text(encoding="utf-8").strip()
            except OSError:
                return False
        else:
            record = destination.parent / "repodata.json"
            entry = _recorded(record).get(destination.name) or {}
            recorded = str(entry.get("sha256", "")) if entry.get("size") == artifact.size else ""
        if recorded != artifact.sha256 or destination.stat().st_size != artifact.size:
            return False
        return changed_at(destination) <= record.stat().st_mtime_ns

    def _index_current(self, subdir: str) -> bool:
        """The subdir's repodata.json lists exactly its package files, none changed since it was written."""
        repodata = self.path / subdir / "repodata.json"
        if not repodata.is_file() or not (self.path / "noarch" / "repodata.json").is_file():
            return False
        written = repodata.stat().st_mtime_ns
        files = [p for p in self._packages() if p.parent.name == subdir]
        listed = _recorded(repodata)
        if sorted(listed) != sorted(p.name for p in files):
            return False
        return all(changed_at(p) <= written for p in files)

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        published = []
        for upload in uploads:
            destination = Path(upload.destination)
            if upload.action != "unchanged":
                copy_atomic(upload.artifact.path, destination)
            if upload.kind == "wheel":
                _write_if_changed(destination.with_name(destination.name + ".sha256"), upload.artifact.sha256 + "\n")
            published.append(Artifact(path=destination, sha256=upload.artifact.sha256, size=upload.artifact.size))
        # Index last: packages are all in place before any index names them.
        subdirs = {u.subdir for u in uploads if u.kind == "conda"}
        if any(u.action != "unchanged" for u in uploads) or not all(map(self._index_current, subdirs)):
            self.index()
        else:
            self.write_simple_pages()
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
            _write_if_changed(simple / project / "index.html", pep503.project_page(project, links))
            count += len(links)
        _write_if_changed(simple / "index.html", pep503.root_page(projects))
        return count


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    write_atomic(path, text)
