"""``index`` of an S3 channel: every index rebuilt from the objects that are there, releases' and nightlies' each
in their own places (channels/nightly.py), and with ``--keep-nightlies N`` the older nightlies deleted.

Each update lists the objects again after reading the index: a record or link a concurrent publisher wrote before
that read names an object that was uploaded before it, so the new listing has it and it is kept. Retention writes
the indexes without the expired nightlies first and deletes their objects after, so no index ever names a missing
object; an index killed in between leaves those objects unlisted, and the next ``--keep-nightlies`` deletes them.
Releases are never deleted, and an index whose content has not changed is not rewritten (its bytes stay).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from pathlib import Path
from tempfile import TemporaryDirectory

from torchbuild.channels import nightly, pep503
from torchbuild.channels import repodata as rd
from torchbuild.channels.admission import admit, check_folder
from torchbuild.channels.s3_store import S3Store
from torchbuild.errors import UserError

CONDA_ROOTS = ("", nightly.CONDA_ROOT)
SIMPLE_ROOTS = (nightly.RELEASE_SIMPLE, nightly.NIGHTLY_SIMPLE)


class S3Index(S3Store):
    def index(self, keep_nightlies: int | None = None) -> str:
        """Rebuild every index from the objects that are there (records of missing files go, new files come in);
        with ``keep_nightlies``, without the nightlies older than that many nights, whose objects are then deleted.
        Returns the summary line, then a line per deleted object."""
        self.check_bucket()
        relative = list(self._listing())
        self._check_places(relative)
        old = nightly.expired(relative, keep_nightlies) if keep_nightlies else []
        dropped = set(old)
        subdirs = {place for place in map(_conda_place, relative) if place is not None}
        subdirs |= {(root, "noarch") for root, _subdir in subdirs} | {("", "noarch")}
        counts = [f"{_joined(root, subdir)}: {self._rebuild_repodata(root, subdir, dropped)} packages"
                  for root, subdir in sorted(subdirs)]  # fmt: skip
        projects = {place for place in map(_wheel_place, relative) if place is not None}
        for simple, project in sorted(projects):
            shown = simple.removesuffix("/simple")  # whl/torch, whl/nightly/torch
            counts.append(f"{shown}/{project}: {self._rebuild_project_page(simple, project, dropped)} wheels")
        for simple in sorted({simple for simple, _project in projects}):
            self._rebuild_root_page(simple, dropped)
        for key in old:
            self._call(f"deleting {key}", self.client.delete_object, Bucket=self.location.bucket, Key=self._key(key))
        summary = "; ".join(counts)
        if keep_nightlies:
            summary += f"; kept the newest {keep_nightlies} nights, removed {len(old)} older nightly files"
        return "\n".join([summary, *(f"removed {key}" for key in old)])

    def _check_places(self, relative: Iterable[str]) -> None:
        """Every package and wheel is in its kind's places: a nightly under the nightlies', a release not (else a
        release index would list a nightly, or retention would delete a release). Before anything is written."""
        for key in relative:
            conda, wheel = _conda_place(key), _wheel_place(key)
            name = key.rsplit("/", 1)[-1]
            if conda is not None and rd.is_package(name) and conda[0] != nightly.conda_root(name):
                belongs = _joined(nightly.conda_root(name), conda[1])
            elif wheel is not None and wheel[0] != nightly.simple_root(name):
                belongs = f"{nightly.simple_root(name)}/{wheel[1]}"
            else:
                continue
            what = "a nightly (a .devN version)" if nightly.is_nightly(name) else "a release"
            raise UserError(f"s3://{self.location.bucket}/{self._key(key)}: {what}, which belongs in "
                            f"{self.s3_url}/{belongs}/; nothing was indexed. Move it there or delete it, then "
                            "index again.")  # fmt: skip

    def _rebuild_repodata(self, conda_root: str, subdir: str, dropped: Set[str]) -> int:
        """Returns how many packages the index lists."""
        key = self._repodata_key(conda_root, subdir)
        where = f"s3://{self.location.bucket}/{key}"
        folder = _joined(conda_root, subdir)
        count = 0

        def update(body: bytes | None) -> bytes | None:
            nonlocal count
            current = rd.parse(body, subdir, where)
            present = {k.rsplit("/", 1)[1]: etag for k, etag in self._listing(conda_root, subdir).items()
                       if k.rsplit("/", 1)[0] == folder and rd.is_package(k) and k not in dropped}  # fmt: skip
            rebuilt = rd.empty(subdir)
            rebuilt.update({k: v for k, v in current.items() if k not in ("packages", "packages.conda")})
            for name, etag in present.items():
                object_key = self._key(f"{folder}/{name}")
                listed = current.get(rd.section(name), {}).get(name)
                if listed and listed.get("sha256") == self._sha256_of_object(object_key, etag):
                    rebuilt[rd.section(name)][name] = listed
                    continue
                with TemporaryDirectory() as tmp:
                    path = Path(tmp) / name
                    self._call(f"downloading {object_key}", self.client.download_file, Bucket=self.location.bucket,
                               Key=object_key, Filename=str(path))  # fmt: skip
                    admit(path, subdir, f"s3://{self.location.bucket}/{object_key}")
                    rebuilt[rd.section(name)][name] = dict(rd.record_of(path).fields)
            count = len(present)
            return rd.dumps(rebuilt)

        self._swap([key], update, f"{folder}/repodata.json")
        return count

    def _rebuild_project_page(self, simple: str, project: str, dropped: Set[str]) -> int:
        """Returns how many wheels the page links."""
        count = 0

        def update(_body: bytes | None) -> bytes:
            nonlocal count
            present = {k.rsplit("/", 1)[1]: etag for k, etag in self._listing(simple, project).items()
                       if _wheel_place(k) == (simple, project) and k not in dropped}  # fmt: skip
            keys = {name: self._key(f"{simple}/{project}/{name}") for name in present}
            for name, key in keys.items():
                check_folder(Path(name), project, f"s3://{self.location.bucket}/{key}")
            digests = {name: self._sha256_of_object(keys[name], etag) for name, etag in present.items()}
            count = len(digests)
            return pep503.project_page(project, digests).encode()

        self._swap(self._page_keys(simple, project), update, f"{simple}/{project}/")
        return count

    def _rebuild_root_page(self, simple: str, dropped: Set[str]) -> None:
        def update(_body: bytes | None) -> bytes:
            projects = {place[1] for k in self._listing(simple) if k not in dropped and (place := _wheel_place(k))}
            return pep503.root_page(projects).encode()

        self._swap(self._page_keys(simple), update, f"{simple}/")


def _joined(conda_root: str, subdir: str) -> str:
    return f"{conda_root}/{subdir}" if conda_root else subdir


def _conda_place(key: str) -> tuple[str, str] | None:
    """(conda root, subdir) of a relative key of a package or a repodata.json: ``<subdir>/<file>`` or
    ``label/nightly/<subdir>/<file>``; None for any other key."""
    folder, _, name = key.rpartition("/")
    if not (rd.is_package(name) or name == "repodata.json"):
        return None
    root, _, subdir = folder.rpartition("/")
    return (root, subdir) if subdir and root in CONDA_ROOTS else None


def _wheel_place(key: str) -> tuple[str, str] | None:
    """(PEP 503 root, project) of a relative key of a wheel, ``<root>/<project>/<file>.whl``; None otherwise."""
    folder, _, name = key.rpartition("/")
    simple, _, project = folder.rpartition("/")
    return (simple, project) if name.endswith(".whl") and project and simple in SIMPLE_ROOTS else None
