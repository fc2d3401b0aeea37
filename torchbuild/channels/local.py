"""A channel in a local directory: conda subdirs indexed by py-rattler, wheels under whl/ with PEP 503 pages.

channel/
  .torchbuild-channel                says this folder is a channel (local_layout.py: what else is recognised)
  .torchbuild.lock                   held by the one process that writes the channel (host/locks.py)
  noarch/repodata.json(.zst)         conda requires noarch even when empty
  linux-64/pytorch-*.conda, repodata.json(.zst)
  whl/simple/index.html              PEP 503 root
  whl/simple/torch/index.html        links carry #sha256=
  whl/simple/torch/torch-*.whl (+ .sha256 sidecar, so pages need not rehash)
  label/nightly/<subdir>/...         nightlies (a .devN version, channels/nightly.py): a conda channel of their own
  whl/nightly/simple/torch/...       and a PEP 503 root of their own, so that no release index ever lists one

Writes: a publish or an index holds the channel's lock from its first look at the channel to its last write, so two
publishers never interleave (the second waits, then sees what the first wrote and is refused a different file under
the same name). Every file is written in full under a temporary name first (host/files.Staged), the index in a
staging folder below the channel (hard links of the subdir's packages and the new ones, py-rattler's index there);
then everything is renamed into place, the packages before the indexes that name them, and the files an index drops
(``index --keep-nightlies``: the nightlies older than the newest N nights) are removed last, all or nothing (a
rename that fails puts back the ones done: host/files.Staged). So a publish that fails or is interrupted leaves the
channel as it was; what a killed one left under temporary names is removed by the next publish or index (under the
lock nothing else can be using it; only the names local_layout.py owns). py-rattler's child dies with its parent
(host/orphans.py), so it never writes after the lock is free.

A file already in the channel is the same as an artifact when its recorded sha256 (the subdir's repodata.json, the
wheel's sidecar) is the artifact's and the file has not changed since that record was written (size, and its
change time not after the record's); otherwise it is hashed. A wheel's sidecar is trusted for its page only where
it is a sha256 and its page links the wheel with the same one (index hashes every wheel); an index is left as it is
only where its repodata.json.zst holds its repodata.json's bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from torchbuild.channels import Upload, action_for, conda_path, nightly, pep503, refuse, wheel_path
from torchbuild.channels.admission import check_place, validate
from torchbuild.channels.local_layout import LOCK, MARKER, MARKER_TEXT, STAGING, check_channel, remove_leftovers
from torchbuild.channels.local_records import page_link, read_sidecar, stage_if_changed
from torchbuild.channels.repodata import PACKAGE_SUFFIXES, index_whole, recorded, same_index
from torchbuild.conda import rattler_child
from torchbuild.conda.archive import PackageUnreadable, read_package
from torchbuild.errors import UserError
from torchbuild.host import locks
from torchbuild.host.files import Staged, changed_at, link
from torchbuild.results import Artifact, sha256_of

WAIT_S = 1800.0  # how long a publisher waits for another one of the same channel
INDEX_FILES = ("repodata.json", "repodata.json.zst")


def check_directory(path: Path) -> None:
    """A channel directory to publish into: a channel, or not yet made or empty; not a file nor a folder of other
    files (``run`` asks before its first stage)."""
    check_channel(path)


class LocalChannel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()
        self.nightly_url = f"{self.url}/{nightly.CONDA_ROOT}"
        self.serves_wheels = True
        self._depth = 0  # how deep this process is inside locked()
        self._digests: dict[Path, str] = {}  # files hashed while the lock is held (cleared when it is taken)

    # --- the lock, and what a killed writer left --------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the channel's lock (made with the channel folder where missing); reentrant within this object."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        check_channel(self.path)  # before anything is written: cleanup runs only in a channel
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"channel {self.path} cannot be made: {exc.strerror or exc}") from None
        busy = f"another process is publishing to or indexing the channel {self.path}; try again once it is done"
        with locks.held(self.path / LOCK, busy=busy, wait_s=WAIT_S, waiting="waiting for another publisher"):
            self._depth = 1
            self._digests.clear()
            try:
                remove_leftovers(self.path)
                yield
            finally:
                self._depth = 0

    # --- reading ----------------------------------------------------------------------------------------

    def _conda_roots(self) -> tuple[Path, Path]:
        """The channel, and the conda channel of its nightlies below it."""
        return self.path, self.path / nightly.CONDA_ROOT

    def _packages(self) -> list[Path]:
        found = (p for root in self._conda_roots() for p in root.glob("*/*"))
        return sorted(p for p in found if p.name.endswith(PACKAGE_SUFFIXES) and p.is_file())

    def _wheels(self) -> list[Path]:
        found = (p for root in (nightly.RELEASE_SIMPLE, nightly.NIGHTLY_SIMPLE) for p in self.path.glob(f"{root}/*/*"))
        return sorted(p for p in found if p.name.endswith(".whl") and p.is_file())

    def _check_indexable(self) -> None:
        """Every package in the channel can be indexed. py-rattler's index, given one it cannot open, panics without
        naming it; so each is opened here first, but one its subdir's index records as it is (that index read it)."""
        indexes: dict[Path, tuple[dict[str, dict[str, object]], int]] = {}  # repodata.json -> its records, written
        for package in self._packages():
            repodata = package.parent / "repodata.json"
            if repodata not in indexes:
                indexes[repodata] = (recorded(repodata), repodata.stat().st_mtime_ns if repodata.is_file() else -1)
            records, written = indexes[repodata]
            entry = records.get(package.name) or {}
            if entry.get("size") == package.stat().st_size and changed_at(package) <= written:
                continue
            try:
                read_package(package, payload=False)
            except PackageUnreadable as exc:
                raise UserError(
                    f"{exc}. The channel's index was left as it was: replace or remove that file, then run "
                    f"'pipeline.py index --channel {self.path}'."
                ) from None

    def _admit_all(self) -> None:
        """``index``: every package and wheel is where it belongs, and every one the index does not record as it is
        (put there by hand, or changed since) passes publish's checks."""
        fix = "The channel's index was left as it was: replace or remove that file, then index again."
        for path in [*self._packages(), *self._wheels()]:
            try:
                check_place(path, self.path)
                kind = "wheel" if path.name.endswith(".whl") else "conda"
                if not self._recorded_as_is(path, kind):
                    validate(path, kind, nothing="nothing was indexed")  # type: ignore[arg-type]
            except UserError as exc:
                raise UserError(f"{exc}\n{fix}") from None

    def _recorded_as_is(self, path: Path, kind: str) -> bool:
        """The channel records ``path`` (its sidecar, its subdir's index) and it has not changed since. A wheel is
        hashed (index hashes every wheel for its page anyway): a sidecar is a text file anyone may have edited."""
        if kind == "wheel":
            record = path.with_name(path.name + ".sha256")
            matches = read_sidecar(record) == self._digest(path)
        else:
            record = path.parent / "repodata.json"
            entry = recorded(record).get(path.name) or {}
            matches = entry.get("size") == path.stat().st_size
        return matches and changed_at(path) <= record.stat().st_mtime_ns

    # --- plan -------------------------------------------------------------------------------------------

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        with self.locked():
            self._check_indexable()  # before the first file is copied: a publish must not stop half done
            return self._plan(conda, wheels, replace)

    def _plan(self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool) -> list[Upload]:
        uploads: list[Upload] = []
        conflicts: list[str] = []
        wanted = [(a, "conda", subdir, self.path / conda_path(subdir, a.path.name)) for a, subdir in conda]
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
                sha256 = record.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return False
        else:
            record = destination.parent / "repodata.json"
            entry = recorded(record).get(destination.name) or {}
            sha256 = str(entry.get("sha256", "")) if entry.get("size") == artifact.size else ""
        if sha256 != artifact.sha256 or destination.stat().st_size != artifact.size:
            return False
        return changed_at(destination) <= record.stat().st_mtime_ns

    def _index_current(self, folder: Path) -> bool:
        """The subdir's repodata.json (``folder``: the subdir's) lists exactly its package files, none changed since
        it was written."""
        repodata = folder / "repodata.json"
        if not index_whole(folder) or not index_whole(folder.parent / "noarch"):
            return False
        written = repodata.stat().st_mtime_ns
        files = [p for p in self._packages() if p.parent == folder]
        listed = recorded(repodata)
        if sorted(listed) != sorted(p.name for p in files):
            return False
        return all(changed_at(p) <= written for p in files)

    # --- apply ------------------------------------------------------------------------------------------

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        with self.locked(), Staged() as staged:
            published = []
            new_packages: dict[Path, Path] = {}  # destination -> its staged file
            new_wheels: dict[Path, str] = {}  # destination -> sha256
            for upload in uploads:
                destination = Path(upload.destination)
                if upload.action != "unchanged":
                    copied = staged.copy(upload.artifact.path, destination)
                    if (copied.sha256, copied.size) != (upload.artifact.sha256, upload.artifact.size):
                        raise UserError(f"{upload.artifact.path} changed while it was being published; nothing was "
                                        "published")  # fmt: skip
                    if upload.kind == "conda":
                        new_packages[destination] = staged.temporary_of(destination)
                if upload.kind == "wheel":
                    new_wheels[destination] = upload.artifact.sha256
                    stage_if_changed(staged, destination.with_name(destination.name + ".sha256"),
                                      upload.artifact.sha256 + "\n")  # fmt: skip
                published.append(Artifact(path=destination, sha256=upload.artifact.sha256, size=upload.artifact.size))
            # The index last: every package it names is renamed into place before it.
            folders = {Path(u.destination).parent for u in uploads if u.kind == "conda"}
            if any(u.action != "unchanged" for u in uploads if u.kind == "conda") or not all(
                map(self._index_current, folders)
            ):
                self._commit_with_index(staged, folders, new_packages, new_wheels)
            else:
                self._stage_pages(staged, new_wheels)
                self._commit(staged, [])
        return published

    def index(self, keep_nightlies: int | None = None) -> str:
        if not self.path.is_dir():
            what = "is not a directory" if self.path.exists() else "does not exist"
            raise UserError(f"channel {self.path} {what}: give the directory a publish wrote (e.g. --channel channel).")
        with self.locked(), Staged() as staged:
            self._check_indexable()
            self._admit_all()
            old = self._expired(keep_nightlies) if keep_nightlies else []
            for path in old:
                staged.remove(path)
                if path.with_name(path.name + ".sha256").is_file():
                    staged.remove(path.with_name(path.name + ".sha256"))
            packages = [p for p in self._packages() if p not in old]
            folders = {p.parent for p in self._packages()}
            folders |= {p.parent for root in self._conda_roots() for p in root.glob("*/repodata.json")}
            if folders:
                self._commit_with_index(staged, folders, {}, {}, verify=True, removed=set(old))
            else:
                self._stage_pages(staged, {}, verify=True, removed=set(old))
                self._commit(staged, [])
        summary = f"{len(packages)} conda packages, {len(self._wheels())} wheels"
        if keep_nightlies:
            summary += f"; kept the newest {keep_nightlies} nights, removed {len(old)} older nightly files"
        return "\n".join([summary, *(f"removed {p.relative_to(self.path).as_posix()}" for p in old)])

    def _expired(self, keep: int) -> list[Path]:
        """The nightly packages and wheels older than the newest ``keep`` nights of their package and platform."""
        nightlies = [p.relative_to(self.path).as_posix() for p in [*self._packages(), *self._wheels()]]
        return [self.path / path for path in nightly.expired(nightlies, keep)]

    def _wheel_sha256(self, wheel: Path, verify: bool) -> str:
        """A wheel's sha256: hashed where ``verify``, or where its sidecar and its page disagree or it changed since
        its sidecar was written; else what both record."""
        if not verify:
            sidecar = wheel.with_name(wheel.name + ".sha256")
            sha256 = read_sidecar(sidecar)
            if sha256 and sha256 == page_link(wheel) and changed_at(wheel) <= sidecar.stat().st_mtime_ns:
                return sha256
        return self._digest(wheel)

    def _digest(self, path: Path) -> str:
        """sha256_of, once per file within one index or publish."""
        if path not in self._digests:
            self._digests[path] = sha256_of(path)
        return self._digests[path]

    # --- staging and committing -------------------------------------------------------------------------

    def _commit_with_index(
        self,
        staged: Staged,
        folders: set[Path],
        new_packages: Mapping[Path, Path],
        new_wheels: Mapping[Path, str],
        verify: bool = False,
        removed: set[Path] | frozenset[Path] = frozenset(),
    ) -> None:
        """py-rattler's index of the subdirs at ``folders`` (and their channel's noarch) as they will be (with
        ``new_packages``, without ``removed``), made in a staging folder per conda channel (the channel, its
        nightlies'); staged with the pages, then everything committed."""
        stagings: list[Path] = []
        try:
            records: list[Path] = []
            for root in sorted({folder.parent for folder in folders}):
                stagings.append(Path(tempfile.mkdtemp(prefix=STAGING, dir=self.path)))
                subdirs = {folder.name for folder in folders if folder.parent == root}
                records += self._stage_index(staged, root, subdirs, new_packages, removed, stagings[-1])
            self._stage_pages(staged, new_wheels, verify, removed)
            self._commit(staged, records, stagings)
        finally:
            for folder in stagings:
                shutil.rmtree(folder, ignore_errors=True)

    def _stage_index(
        self,
        staged: Staged,
        root: Path,
        subdirs: set[str],
        new_packages: Mapping[Path, Path],
        removed: set[Path] | frozenset[Path],
        folder: Path,
    ) -> list[Path]:
        """The index of the conda channel at ``root`` made in ``folder`` and staged; returns its repodata.json
        paths."""
        indexed = sorted(subdirs | {"noarch"})
        for subdir in indexed:
            (folder / subdir).mkdir()
            for package in self._packages():
                if package.parent == root / subdir and package not in new_packages and package not in removed:
                    link(package, folder / subdir / package.name)
        for destination, temporary in new_packages.items():
            if destination.parent.parent == root:
                link(temporary, folder / destination.parent.name / destination.name)
        rattler_child.call("index", directory=str(folder), write_zst=True)
        for subdir in indexed:
            if same_index(folder / subdir / "repodata.json", root / subdir / "repodata.json"):
                continue  # what it says has not changed: its bytes stay (a release's, while nightlies are pruned)
            for name in INDEX_FILES:
                made, current = folder / subdir / name, root / subdir / name
                if made.is_file():
                    staged.adopt(made, current)
        return [root / subdir / "repodata.json" for subdir in indexed]

    def _commit(self, staged: Staged, records: Sequence[Path], stagings: Sequence[Path] = ()) -> None:
        """Rename every staged file into place; then the records (repodata.json, sidecars) are made newer than the
        files they describe (a rename, and removing the ``stagings`` folders' hard links, change a file's change
        time), so that a later publish trusts them without hashing."""
        if not (self.path / MARKER).is_file():  # what says this folder is a channel (local_layout.py)
            staged.write_text(self.path / MARKER, MARKER_TEXT)
        sidecars = [p for p in staged.destinations if p.name.endswith(".sha256")]
        staged.commit()
        for folder in stagings:
            shutil.rmtree(folder, ignore_errors=True)
        for record in [*records, *sidecars]:
            with contextlib.suppress(OSError):
                os.utime(record)

    def _stage_pages(
        self,
        staged: Staged,
        new_wheels: Mapping[Path, str],
        verify: bool = False,
        removed: set[Path] | frozenset[Path] = frozenset(),
    ) -> None:
        """The PEP 503 pages of the wheels there (less ``removed``) and the ones being published, under each root
        (releases', nightlies'), where they differ from the pages there; and the sidecar of a wheel there where it
        does not hold the wheel's sha256. ``verify`` (index): every wheel there is hashed."""
        there = {wheel: "" for wheel in self._wheels() if wheel not in removed}
        for root in (nightly.RELEASE_SIMPLE, nightly.NIGHTLY_SIMPLE):
            simple = self.path / root
            wheels = {w: d for w, d in [*there.items(), *new_wheels.items()] if w.parent.parent == simple}
            if not wheels and not simple.is_dir():
                continue
            projects: dict[str, dict[str, str]] = {}
            for wheel, sha256 in sorted(wheels.items()):
                if not sha256:
                    sha256 = self._wheel_sha256(wheel, verify)
                    stage_if_changed(staged, wheel.with_name(wheel.name + ".sha256"), sha256 + "\n")
                projects.setdefault(wheel.parent.name, {})[wheel.name] = sha256
            for project in sorted(p.name for p in simple.iterdir() if p.is_dir()) if simple.is_dir() else []:
                projects.setdefault(project, {})
            for project, links in sorted(projects.items()):
                stage_if_changed(staged, simple / project / "index.html", pep503.project_page(project, links))
            stage_if_changed(staged, simple / "index.html", pep503.root_page(sorted(projects)))
