"""A channel in an S3 bucket (``s3://bucket/prefix``), written with boto3; installers read it over HTTP.

Layout under the prefix (the local channel's, plus the pages pip asks for at a key ending in '/'):

  <subdir>/<package>.conda            metadata sha256=<hex>, checked after the upload
  <subdir>/repodata.json              noarch/ always exists
  whl/simple/ and whl/simple/index.html               PEP 503 root
  whl/simple/<project>/ and .../<project>/index.html  project page
  whl/simple/<project>/<wheel>.whl    metadata sha256=<hex>
  label/nightly/<subdir>/...          nightlies (a .devN version, channels/nightly.py): a conda channel of their own
  whl/nightly/simple/...              and a PEP 503 root of their own, so that no release index ever lists one

Endpoint, region and credentials come from boto3's standard chain (AWS_* variables, AWS_ENDPOINT_URL_S3, profiles,
instance roles); none is ever printed.

Order: every package is uploaded, on condition that its key still holds what the plan saw there (nothing, or the
object --replace replaces: s3_upload.py), and verified; then each index file is merged: read with its ETag, each
package of the publication checked to still hold what was uploaded, records added, written back with If-Match
(If-None-Match: * for a new one). A concurrent publisher that wrote in between makes the write fail with 412: an
upload is then refused, an index merge redone on the new content. This is S3's own
compare-and-swap: unlike a lock object with an expiry, it cannot be stolen from a slow publisher and leaves nothing
to clean up after a kill. Transient errors (5xx, throttling, dropped connections) are retried by botocore's standard
retry mode with exponential backoff. A publish deletes nothing; ``index`` (s3_index.py) rebuilds the indexes from
the objects, and with ``--keep-nightlies N`` deletes the nightlies older than the newest N nights.
s3_store.py has the reading, the layout's keys and the compare-and-swap both use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.channels import Upload, action_for, conda_path, nightly, pep503, project_of, refuse, wheel_path
from torchbuild.channels import repodata as rd
from torchbuild.channels.s3_client import CONFLICT, MB, Progress, boto_errors, error_code
from torchbuild.channels.s3_index import S3Index
from torchbuild.channels.s3_upload import put_file
from torchbuild.config import environment
from torchbuild.errors import UserError
from torchbuild.results import Artifact


class S3Channel(S3Index):
    def __init__(self, url: str, client: Any | None = None) -> None:
        super().__init__(url, client)
        self._records: dict[str, rd.Record] = {}  # destination key -> record, read while planning
        self._seen: dict[str, str] = {}  # destination key -> the ETag plan() saw there (none: no object)
        self.replace = False  # the user's --replace, from plan()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """No lock: every write is conditional on what this publisher saw (the module's docstring)."""
        yield

    # --- plan -----------------------------------------------------------------------------------------

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        self.check_bucket()
        self.replace = replace
        wanted = [(a, "conda", subdir, self._key(conda_path(subdir, a.path.name))) for a, subdir in conda]
        wanted += [(a, "wheel", "whl", self._key(wheel_path(a.path.name))) for a in wheels]
        uploads: list[Upload] = []
        conflicts: list[str] = []
        for artifact, kind, subdir, key in wanted:
            if kind == "conda":
                record = rd.record_of(artifact.path, artifact.sha256)
                if record.subdir != subdir:
                    raise UserError(f"{artifact.path}: its info/index.json says subdir {record.subdir}, not {subdir}")
                self._records[key] = record
            head = self._head(key)
            if head is not None:
                self._seen[key] = str(head.get("ETag", ""))
            published = (head or {}).get("Metadata", {}).get("sha256")
            action = action_for(head is not None, lambda: published == artifact.sha256, replace)  # noqa: B023
            if action is None:
                conflicts.append(f"s3://{self.location.bucket}/{key} (sha256 {published or 'unknown'})")
                continue
            uploads.append(Upload(artifact=artifact, kind=kind, subdir=subdir, destination=key, action=action))  # type: ignore[arg-type]
        listed = self._listed_elsewhere(uploads) if not replace else []
        if conflicts or listed:
            raise refuse(conflicts + listed)
        return uploads

    def _listed_elsewhere(self, uploads: Sequence[Upload]) -> list[str]:
        """Names the index lists with another sha256 (a file replaced by hand, an index from another tool)."""
        found = []
        for root, subdir in sorted({_conda_place(u) for u in uploads if u.kind == "conda"}):
            key = self._repodata_key(root, subdir)
            body, _etag = self._get(key)
            current = rd.parse(body, subdir, f"s3://{self.location.bucket}/{key}")
            for upload in uploads:
                if upload.kind == "conda" and _conda_place(upload) == (root, subdir):
                    listed = current.get(rd.section(upload.artifact.path.name), {}).get(upload.artifact.path.name)
                    if listed and listed.get("sha256") != upload.artifact.sha256:
                        found.append(f"{key} lists {upload.artifact.path.name} with sha256 {listed.get('sha256')}")
        return found

    # --- apply ----------------------------------------------------------------------------------------

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        conda = [u for u in uploads if u.kind == "conda"]
        for upload in uploads:
            if upload.action != "unchanged":
                self._upload(upload.artifact, upload.destination)
        # Index last: every package it will name is in place and verified.
        published = {u.destination: u.artifact.sha256 for u in uploads}
        places = {_conda_place(u) for u in conda}
        for root, subdir in sorted(places | {(root, "noarch") for root, _ in places} | {("", "noarch")}):
            records = [self._records[u.destination] for u in conda if _conda_place(u) == (root, subdir)]
            self._merge_repodata(root, subdir, records, published)
        projects: dict[tuple[str, str], dict[str, str]] = {}  # (PEP 503 root, project) -> wheel -> sha256
        for u in uploads:
            if u.kind == "wheel":
                name = u.artifact.path.name
                projects.setdefault((nightly.simple_root(name), project_of(name)), {})[name] = u.artifact.sha256
        for (simple, project), links in sorted(projects.items()):
            self._merge_project_page(simple, project, links, published)
        for simple in sorted({simple for simple, _ in projects}):
            self._merge_root_page(simple, {p for s, p in projects if s == simple}, published)
        # Objects, not files: their paths are the keys (the stage reports files only).
        return [Artifact(path=Path(u.destination), sha256=u.artifact.sha256, size=u.artifact.size) for u in uploads]

    def _upload(self, artifact: Artifact, key: str) -> None:
        """Put the file at ``key`` on condition that the key still holds what plan() saw there (nothing, or the
        object --replace replaces): a concurrent publisher that wrote the name meanwhile is never overwritten."""
        ClientError, BotoCoreError = boto_errors()
        seen = self._seen.get(key)
        condition = {"IfMatch": seen} if seen else {"IfNoneMatch": "*"}
        extra = {"Metadata": {"sha256": artifact.sha256}, "ContentType": "application/octet-stream"}
        part = environment.s3_part_mb() * MB  # files above this go up in parts of this size, four at a time
        progress = Progress(key.rsplit("/", 1)[-1], artifact.size) if artifact.size > part else None
        try:
            put_file(self.client, self.location.bucket, key, artifact.path, extra=extra, condition=condition,
                     part_size=part, progress=progress)  # fmt: skip
        except ClientError as exc:
            if error_code(exc) in CONFLICT:
                raise UserError(
                    f"s3://{self.location.bucket}/{key}: another publisher wrote this name after this publish "
                    "checked it; it was not overwritten, and the index was not changed. Run the same command again: "
                    "the same file is then a no-op, a different one is refused unless --replace"
                ) from None
            raise self._error(exc, f"uploading {artifact.path.name}") from None
        except (BotoCoreError, OSError) as exc:
            raise self._error(exc, f"uploading {artifact.path.name}") from None
        head = self._head(key)
        got = None if head is None else (head.get("Metadata", {}).get("sha256"), int(head.get("ContentLength", -1)))
        if got != (artifact.sha256, artifact.size):
            raise UserError(
                f"s3://{self.location.bucket}/{key}: after the upload the object has sha256/size {got}, expected "
                f"{(artifact.sha256, artifact.size)} (another publisher of the same name?); the index was not changed"
            )

    # --- index files, merged with compare-and-swap (s3_store.py) ------------------------------------

    def _check_published(self, published: Mapping[str, str]) -> None:
        """Each key still holds the sha256 this publication uploaded (or found there): run before each index write,
        so that no index names another publisher's bytes with this publication's sha256."""
        for key, sha256 in published.items():
            head = self._head(key)
            found = None if head is None else head.get("Metadata", {}).get("sha256")
            if found != sha256:
                now = f"it now has sha256 {found or 'unknown'}" if head is not None else "it is gone"
                raise UserError(
                    f"s3://{self.location.bucket}/{key}: another publisher replaced it after this publish uploaded "
                    f"it ({now}, this publish uploaded {sha256}); the index was not changed to name it. Publish "
                    "again once the other publisher is done (--replace to put this file back)"
                )

    def _merge_repodata(
        self, conda_root: str, subdir: str, records: list[rd.Record], published: Mapping[str, str]
    ) -> None:
        key = self._repodata_key(conda_root, subdir)
        where = f"s3://{self.location.bucket}/{key}"

        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            current = rd.parse(body, subdir, where)
            merged = rd.merge(current, records, self.replace)
            if merged is None:
                return rd.dumps(current) if body is None else None
            return rd.dumps(merged)

        self._swap([key], update, f"{conda_root + '/' if conda_root else ''}{subdir}/repodata.json")

    def _merge_project_page(
        self, simple: str, project: str, links: dict[str, str], published: Mapping[str, str]
    ) -> None:
        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            listed = pep503.wheel_links(body.decode()) if body else {}
            clashing = [name for name, digest in links.items() if listed.get(name, digest) != digest]
            if clashing and not self.replace:
                raise UserError(f"{self.s3_url}: the page of {project} lists {', '.join(clashing)} with another sha256")
            merged = {**listed, **links}
            return pep503.project_page(project, merged).encode() if merged != listed else None

        self._swap(self._page_keys(simple, project), update, f"{simple}/{project}/")

    def _merge_root_page(self, simple: str, projects: set[str], published: Mapping[str, str]) -> None:
        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            listed = pep503.project_links(body.decode()) if body else set()
            return pep503.root_page(listed | projects).encode() if not projects <= listed else None

        self._swap(self._page_keys(simple), update, f"{simple}/")


def _conda_place(upload: Upload) -> tuple[str, str]:
    """(conda root, subdir) a package goes to: its subdir in the channel, or in the nightlies' label/nightly."""
    return nightly.conda_root(upload.artifact.path.name), upload.subdir
