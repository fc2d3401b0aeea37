"""A channel in a local directory: conda subdirs indexed by py-rattler, wheels under whl/ with PEP 503 pages.

channel/
  .torchbuild-channel                says this folder is a channel (local_layout.py: what else is recognised)
  .torchbuild.lock                   held by the one process that writes the channel (host/locks.py)
  noarch/repodata.json(.zst)         conda requires noarch even when empty
  linux-64/pytorch-*.conda, repodata.json(.zst)
  whl/simple/index.html              PEP 503 root
  whl/simple/torch/index.html        links carry #sha256=
  whl/simple/torch/torch-*.whl (+ .sha256 sidecar, so pages need not rehash)

Writes: a publish or an index holds the channel's lock from its first look at the channel to its last write, so two
publishers never interleave (the second waits, then sees what the first wrote and is refused a different file under
the same name). Every file is written in full under a temporary name first (host/files.Staged), the index in a
staging folder below the channel (hard links of the subdir's packages and the new ones, py-rattler's index there);
then everything is renamed into place, the packages before the indexes that name them, all or nothing (a rename
that fails puts back the ones done: host/files.Staged). So a publish that fails or is interrupted leaves the channel
as it was; what a killed one left under temporary names is removed by the next publish or index (under the lock
nothing else can be using it; only the names local_layout.py owns). py-rattler's child dies with its parent
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
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from torchbuild.channels import Upload, action_for, pep503, refuse, wheel_path
from torchbuild.channels.admission import check_place, validate
from torchbuild.channels.local_layout import LOCK, MARKER, MARKER_TEXT, STAGING, check_channel, remove_leftovers
from torchbuild.channels.repodata import PACKAGE_SUFFIXES
from torchbuild.conda import rattler_child
from torchbuild.conda.archive import PackageUnreadable, read_package
from torchbuild.config import nesting
from torchbuild.errors import UserError
from torchbuild.host import locks
from torchbuild.host.files import Staged, changed_at, link
from torchbuild.results import Artifact, sha256_of

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

WAIT_S = 1800.0  # how long a publisher waits for another one of the same channel
INDEX_FILES = ("repodata.json", "repodata.json.zst")


def _recorded(repodata: Path) -> dict[str, dict[str, object]]:
    """The records of a subdir's repodata.json by file name; empty when it is missing or unreadable."""
    try:
        raw = nesting.loads(repodata.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    records: dict[str, dict[str, object]] = {}
    for key in ("packages", "packages.conda"):
        section = raw.get(key)
        if isinstance(section, dict):
            records.update({str(n): r for n, r in section.items() if isinstance(r, dict)})
    return records


def check_directory(path: Path) -> None:
    """A channel directory to publish into: a channel, or not yet made or empty; not a file nor a folder of other
    files (``run`` asks before its first stage)."""
    check_channel(path)


class LocalChannel:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = path.resolve().as_uri()
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

    def _packages(self) -> list[Path]:
        return sorted(p for p in self.path.glob("*/*") if p.name.endswith(PACKAGE_SUFFIXES) and p.is_file())

    def _wheels(self) -> list[Path]:
        return sorted(p for p in self.path.glob("whl/simple/*/*.whl") if p.is_file())

    def _check_indexable(self) -> None:
        """Every package in the channel can be indexed. py-rattler's index, given one it cannot open, panics without
        naming it; so each is opened here first, but one its subdir's index records as it is (that index read it)."""
        indexes: dict[Path, tuple[dict[str, dict[str, object]], int]] = {}  # repodata.json -> its records, written
        for package in self._packages():
            repodata = package.parent / "repodata.json"
            if repodata not in indexes:
                indexes[repodata] = (_recorded(repodata), repodata.stat().st_mtime_ns if repodata.is_file() else -1)
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
            matches = _read_sidecar(record) == self._digest(path)
        else:
            record = path.parent / "repodata.json"
            entry = _recorded(record).get(path.name) or {}
            matches = entry.get("size") == path.stat().st_size
        return matches and changed_at(path) <= record.stat().st_mtime_ns

    # --- plan -------------------------------------------------------------------------------------------

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        with self.locked():
            self._check_indexable()  # before the first file is copied: a publish must not stop half done
            return self._plan(conda, wheels, replace)

    def _plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool
    ) -> list[Upload]:
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
            except (OSError, UnicodeDecodeError):
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
        if not _index_whole(self.path / subdir) or not _index_whole(self.path / "noarch"):
            return False
        written = repodata.stat().st_mtime_ns
        files = [p for p in self._packages() if p.parent.name == subdir]
        listed = _recorded(repodata)
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
                    _stage_if_changed(staged, destination.with_name(destination.name + ".sha256"),
                                      upload.artifact.sha256 + "\n")  # fmt: skip
                published.append(Artifact(path=destination, sha256=upload.artifact.sha256, size=upload.artifact.size))
            # The index last: every package it names is renamed into place before it.
            subdirs = {u.subdir for u in uploads if u.kind == "conda"}
            if any(u.action != "unchanged" for u in uploads if u.kind == "conda") or not all(
                map(self._index_current, subdirs)
            ):
                self._commit_with_index(staged, subdirs, new_packages, new_wheels)
            else:
                self._stage_pages(staged, new_wheels)
                self._commit(staged, [])
        return published

    def index(self) -> str:
        if not self.path.is_dir():
            what = "is not a directory" if self.path.exists() else "does not exist"
            raise UserError(f"channel {self.path} {what}: give the directory a publish wrote (e.g. --channel channel).")
        with self.locked(), Staged() as staged:
            self._check_indexable()
            self._admit_all()
            packages = self._packages()
            subdirs = {p.parent.name for p in packages}
            subdirs |= {p.parent.name for p in self.path.glob("*/repodata.json")}
            if subdirs:
                self._commit_with_index(staged, subdirs, {}, {}, verify=True)
            else:
                self._stage_pages(staged, {}, verify=True)
                self._commit(staged, [])
        return f"{len(packages)} conda packages, {len(self._wheels())} wheels"

    def _wheel_sha256(self, wheel: Path, verify: bool) -> str:
        """A wheel's sha256: hashed where ``verify``, or where its sidecar and its page disagree or it changed since
        its sidecar was written; else what both record."""
        if not verify:
            sidecar = wheel.with_name(wheel.name + ".sha256")
            recorded = _read_sidecar(sidecar)
            if recorded and recorded == _page_link(wheel) and changed_at(wheel) <= sidecar.stat().st_mtime_ns:
                return recorded
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
        subdirs: set[str],
        new_packages: Mapping[Path, Path],
        new_wheels: Mapping[Path, str],
        verify: bool = False,
    ) -> None:
        """py-rattler's index of ``subdirs`` (and noarch) as they will be, made in a staging folder; staged with the
        pages, then everything committed."""
        folder = Path(tempfile.mkdtemp(prefix=STAGING, dir=self.path))
        try:
            indexed = sorted(subdirs | {"noarch"})
            for subdir in indexed:
                (folder / subdir).mkdir()
                for package in self._packages():
                    if package.parent.name == subdir and package not in new_packages:
                        link(package, folder / subdir / package.name)
            for destination, temporary in new_packages.items():
                link(temporary, folder / destination.parent.name / destination.name)
            rattler_child.call("index", directory=str(folder), write_zst=True)
            for subdir in indexed:
                noarch_as_is = subdir == "noarch" and subdir not in subdirs and (self.path / subdir).is_dir()
                for name in INDEX_FILES:
                    made, current = folder / subdir / name, self.path / subdir / name
                    if made.is_file() and not (noarch_as_is and _same_bytes(made, current)):
                        staged.adopt(made, current)
            self._stage_pages(staged, new_wheels, verify)
            self._commit(staged, [self.path / subdir / "repodata.json" for subdir in indexed], folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _commit(self, staged: Staged, records: Sequence[Path], staging: Path | None = None) -> None:
        """Rename every staged file into place; then the records (repodata.json, sidecars) are made newer than the
        files they describe (a rename, and the staging folder's hard links, change a file's change time), so that a
        later publish trusts them without hashing."""
        if not (self.path / MARKER).is_file():  # what says this folder is a channel (local_layout.py)
            staged.write_text(self.path / MARKER, MARKER_TEXT)
        sidecars = [p for p in staged.destinations if p.name.endswith(".sha256")]
        staged.commit()
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for record in [*records, *sidecars]:
            with contextlib.suppress(OSError):
                os.utime(record)

    def _stage_pages(self, staged: Staged, new_wheels: Mapping[Path, str], verify: bool = False) -> None:
        """The PEP 503 pages of the wheels there and the ones being published, where they differ from the pages
        there; and the sidecar of a wheel there where it does not hold the wheel's sha256. ``verify`` (index):
        every wheel there is hashed."""
        simple = self.path / "whl" / "simple"
        wheels = {wheel: "" for wheel in self._wheels()} | dict(new_wheels)
        if not wheels and not simple.is_dir():
            return
        projects: dict[str, dict[str, str]] = {}
        for wheel, sha256 in sorted(wheels.items()):
            if not sha256:
                sha256 = self._wheel_sha256(wheel, verify)
                _stage_if_changed(staged, wheel.with_name(wheel.name + ".sha256"), sha256 + "\n")
            projects.setdefault(wheel.parent.name, {})[wheel.name] = sha256
        for project in sorted(p.name for p in simple.iterdir() if p.is_dir()) if simple.is_dir() else []:
            projects.setdefault(project, {})
        for project, links in sorted(projects.items()):
            _stage_if_changed(staged, simple / project / "index.html", pep503.project_page(project, links))
        _stage_if_changed(staged, simple / "index.html", pep503.root_page(sorted(projects)))


def _page_link(wheel: Path) -> str:
    """The sha256 the wheel's project page links it with; "" when it does not."""
    try:
        page = (wheel.parent / "index.html").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    return pep503.wheel_links(page).get(wheel.name, "")


def _read_sidecar(sidecar: Path) -> str:
    """The sha256 a wheel's sidecar records; "" when it is missing or holds anything but one."""
    try:
        text = sidecar.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return text if pep503.is_sha256(text) else ""


def _index_whole(subdir: Path) -> bool:
    """The subdir's repodata.json is a JSON object and its repodata.json.zst (what conda clients fetch first) holds
    the same bytes."""
    try:
        plain = (subdir / "repodata.json").read_bytes()
        packed = zstd.decompress((subdir / "repodata.json.zst").read_bytes())
        return packed == plain and isinstance(nesting.loads(plain), dict)
    except (OSError, ValueError, zstd.ZstdError):
        return False


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _stage_if_changed(staged: Staged, path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    staged.write_text(path, text)
