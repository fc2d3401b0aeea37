"""A channel in an S3 bucket (``s3://bucket/prefix``), written with boto3; installers read it over HTTP.

Layout under the prefix (the local channel's, plus the pages pip asks for at a key ending in '/'):

  <subdir>/<package>.conda            metadata sha256=<hex>, checked after the upload
  <subdir>/repodata.json              noarch/ always exists
  whl/simple/ and whl/simple/index.html               PEP 503 root
  whl/simple/<project>/ and .../<project>/index.html  project page
  whl/simple/<project>/<wheel>.whl    metadata sha256=<hex>

Endpoint, region and credentials come from boto3's standard chain (AWS_* variables, AWS_ENDPOINT_URL_S3, profiles,
instance roles); none is ever printed.

Order: every package is uploaded, on condition that its key still holds what the plan saw there (nothing, or the
object --replace replaces: s3_upload.py), and verified; then each index file is merged: read with its ETag, each
package of the publication checked to still hold what was uploaded, records added, written back with If-Match
(If-None-Match: * for a new one). A concurrent publisher that wrote in between makes the write fail with 412: an
upload is then refused, an index merge redone on the new content. This is S3's own
compare-and-swap: unlike a lock object with an expiry, it cannot be stolen from a slow publisher and leaves nothing
to clean up after a kill. Transient errors (5xx, throttling, dropped connections) are retried by botocore's standard
retry mode with exponential backoff. Nothing is deleted. ``index`` lists the objects again on each merge attempt,
so that it keeps what a concurrent publisher added meanwhile.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from torchbuild.channels import Upload, action_for, nightly, pep503, project_of, refuse, wheel_path
from torchbuild.channels import repodata as rd
from torchbuild.channels.admission import admit, check_folder
from torchbuild.channels.s3_client import (
    CONFLICT,
    MB,
    RETRIES,
    Progress,
    boto_errors,
    describe_error,
    error_code,
    http_url,
    make_client,
)
from torchbuild.channels.s3_upload import put_file
from torchbuild.config import environment
from torchbuild.config.channel_spec import parse_s3
from torchbuild.errors import UserError
from torchbuild.host.console import console
from torchbuild.results import Artifact


class S3Channel:
    def __init__(self, url: str, client: Any | None = None) -> None:
        self.location = parse_s3(url)
        self.s3_url = url.rstrip("/")
        self.client = client if client is not None else make_client()
        self.url = http_url(str(self.client.meta.endpoint_url), self.location)  # what installers use
        self._records: dict[str, rd.Record] = {}  # destination key -> record, read while planning
        self._digests: dict[tuple[str, str], str] = {}  # (key, ETag) -> sha256 of the object, for index()
        self._seen: dict[str, str] = {}  # destination key -> the ETag plan() saw there (none: no object)
        self.replace = False  # the user's --replace, from plan()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """No lock: every write is conditional on what this publisher saw (the module's docstring)."""
        yield

    # --- errors ---------------------------------------------------------------------------------------

    def _error(self, exc: Exception, doing: str) -> UserError:
        return describe_error(exc, doing, self.s3_url, self.location.bucket, str(self.client.meta.endpoint_url))

    def _call(self, doing: str, operation: Callable[..., Any], **arguments: Any) -> Any:
        ClientError, BotoCoreError = boto_errors()
        try:
            return operation(**arguments)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, doing) from None

    # --- reading --------------------------------------------------------------------------------------

    def _read(self, key: str, body: bool) -> dict[str, Any] | None:
        """The object's head, or its whole answer with its bytes read (``body``); None when there is none."""
        ClientError, BotoCoreError = boto_errors()
        try:
            if not body:
                return dict(self.client.head_object(Bucket=self.location.bucket, Key=key))
            got = dict(self.client.get_object(Bucket=self.location.bucket, Key=key))
            return {**got, "Body": got["Body"].read()}
        except ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(exc, f"reading {key}") from None
        except BotoCoreError as exc:
            raise self._error(exc, f"reading {key}") from None

    def _head(self, key: str) -> dict[str, Any] | None:
        return self._read(key, body=False)

    def _get(self, key: str) -> tuple[bytes | None, str | None]:
        """The object's bytes and ETag, or (None, None) when there is none."""
        got = self._read(key, body=True)
        return (None, None) if got is None else (bytes(got["Body"]), str(got["ETag"]))

    def _list(self, under: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(f"listing {under}", lambda: list(paginator.paginate(Bucket=self.location.bucket,
                                                                                Prefix=under)))  # fmt: skip
        for page in pages:
            yield from page.get("Contents", [])

    def check_bucket(self) -> None:
        self._call("checking the bucket", self.client.head_bucket, Bucket=self.location.bucket)

    # --- plan -----------------------------------------------------------------------------------------

    def _wheel_key(self, wheel_name: str) -> str:
        return self.location.key(*wheel_path(wheel_name).split("/"))

    def plan(
        self, conda: Sequence[tuple[Artifact, str]], wheels: Sequence[Artifact], replace: bool = False
    ) -> list[Upload]:
        refuse_nightlies([a for a, _ in conda] + list(wheels))
        self.check_bucket()
        self.replace = replace
        wanted = [(a, "conda", subdir, self.location.key(subdir, a.path.name)) for a, subdir in conda]
        wanted += [(a, "wheel", "whl", self._wheel_key(a.path.name)) for a in wheels]
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
        for subdir in sorted({u.subdir for u in uploads if u.kind == "conda"}):
            key = self.location.key(subdir, "repodata.json")
            body, _etag = self._get(key)
            current = rd.parse(body, subdir, f"s3://{self.location.bucket}/{key}")
            for upload in uploads:
                if upload.kind == "conda" and upload.subdir == subdir:
                    listed = current.get(rd.section(upload.artifact.path.name), {}).get(upload.artifact.path.name)
                    if listed and listed.get("sha256") != upload.artifact.sha256:
                        found.append(f"{key} lists {upload.artifact.path.name} with sha256 {listed.get('sha256')}")
        return found

    # --- apply ----------------------------------------------------------------------------------------

    def apply(self, uploads: Sequence[Upload]) -> list[Artifact]:
        records = [self._records[u.destination] for u in uploads if u.kind == "conda"]
        for upload in uploads:
            if upload.action != "unchanged":
                self._upload(upload.artifact, upload.destination)
        # Index last: every package it will name is in place and verified.
        published = {u.destination: u.artifact.sha256 for u in uploads}
        for subdir in sorted({u.subdir for u in uploads if u.kind == "conda"} | {"noarch"}):
            self._merge_repodata(subdir, [r for r in records if r.subdir == subdir], published)
        wheels = [u for u in uploads if u.kind == "wheel"]
        if wheels:
            projects: dict[str, dict[str, str]] = {}
            for u in wheels:
                project = project_of(u.artifact.path.name)
                projects.setdefault(project, {})[u.artifact.path.name] = u.artifact.sha256
            for project, links in sorted(projects.items()):
                self._merge_project_page(project, links, published)
            self._merge_root_page(set(projects), published)
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

    # --- index files, merged with compare-and-swap ---------------------------------------------------

    def _swap(self, keys: Sequence[str], update: Callable[[bytes | None], bytes | None], what: str) -> bool:
        """Make every key hold ``update(content of keys[0])``; each write is conditional on the ETag read.
        Returns whether anything was written."""
        ClientError, BotoCoreError = boto_errors()
        for attempt in range(RETRIES):
            current = [self._get(key) for key in keys]
            wanted = update(current[0][0])
            if wanted is None:
                wanted = current[0][0]
            if wanted is None:
                return False
            wrote = False
            try:
                for key, (body, etag) in zip(keys, current, strict=True):
                    if body == wanted:
                        continue
                    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
                    content_type = "application/json" if key.endswith(".json") else "text/html"
                    self.client.put_object(
                        Bucket=self.location.bucket, Key=key, Body=wanted, ContentType=content_type, **condition
                    )
                    wrote = True
                return wrote
            except ClientError as exc:
                if error_code(exc) not in CONFLICT:
                    raise self._error(exc, f"writing {what}") from None
            except BotoCoreError as exc:
                raise self._error(exc, f"writing {what}") from None
            console.print(f"  {what}: changed by another publisher meanwhile; merging again")
            time.sleep(min(5.0, 0.2 * 2**attempt) * (0.5 + random.random()))
        raise UserError(f"{self.s3_url}: {what} kept changing under {RETRIES} merge attempts; rerun to complete it")

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

    def _merge_repodata(self, subdir: str, records: list[rd.Record], published: Mapping[str, str]) -> None:
        key = self.location.key(subdir, "repodata.json")
        where = f"s3://{self.location.bucket}/{key}"

        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            current = rd.parse(body, subdir, where)
            merged = rd.merge(current, records, self.replace)
            if merged is None:
                return rd.dumps(current) if body is None else None
            return rd.dumps(merged)

        self._swap([key], update, f"{subdir}/repodata.json")

    def _page_keys(self, *parts: str) -> list[str]:
        directory = self.location.key("whl", "simple", *parts)
        return [directory + "/index.html", directory + "/"]  # pip asks for '<project>/'; a browser may ask index.html

    def _merge_project_page(self, project: str, links: dict[str, str], published: Mapping[str, str]) -> None:
        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            listed = pep503.wheel_links(body.decode()) if body else {}
            clashing = [name for name, digest in links.items() if listed.get(name, digest) != digest]
            if clashing and not self.replace:
                raise UserError(f"{self.s3_url}: the page of {project} lists {', '.join(clashing)} with another sha256")
            merged = {**listed, **links}
            return pep503.project_page(project, merged).encode() if merged != listed else None

        self._swap(self._page_keys(project), update, f"whl/simple/{project}/")

    def _merge_root_page(self, projects: set[str], published: Mapping[str, str]) -> None:
        def update(body: bytes | None) -> bytes | None:
            self._check_published(published)
            listed = pep503.project_links(body.decode()) if body else set()
            return pep503.root_page(listed | projects).encode() if not projects <= listed else None

        self._swap(self._page_keys(), update, "whl/simple/")

    # --- rebuild --------------------------------------------------------------------------------------
    # Each update lists the objects again after reading the index: a record or link a concurrent publisher wrote
    # before that read names an object that was uploaded before it, so the new listing has it and it is kept.

    def _listing(self, *parts: str) -> dict[str, str]:
        """Key relative to the prefix -> ETag, of every object under ``parts``."""
        root = f"{self.location.prefix}/" if self.location.prefix else ""
        under = root + "".join(f"{part}/" for part in parts)
        return {str(obj["Key"])[len(root) :]: str(obj["ETag"]) for obj in self._list(under)}

    def index(self, keep_nightlies: int | None = None) -> str:
        """Rebuild every index from the objects that are there (records of missing files go, new files come in)."""
        if keep_nightlies is not None:
            raise UserError(f"index: --keep-nightlies is not supported for S3 channels yet ({self.s3_url}); "
                            "it prunes a local channel directory.")  # fmt: skip
        self.check_bucket()
        keys = [key.split("/") for key in self._listing()]
        subdirs = {"noarch"} | {k[0] for k in keys if len(k) == 2 and (rd.is_package(k[1]) or k[1] == "repodata.json")}
        projects = {k[2] for k in keys if _is_wheel(k)}
        counts = [f"{subdir}: {self._rebuild_repodata(subdir)} packages" for subdir in sorted(subdirs)]
        counts += [f"whl/{project}: {self._rebuild_project_page(project)} wheels" for project in sorted(projects)]
        if projects:
            self._swap(self._page_keys(), lambda _body: self._root_page(), "whl/simple/")
        return "; ".join(counts)

    def _sha256_of_object(self, key: str, etag: str) -> str:
        """The sha256 its publisher recorded; else (put there by other means) downloaded, admitted and hashed."""
        if (key, etag) in self._digests:
            return self._digests[key, etag]
        head = self._head(key)
        digest = (head or {}).get("Metadata", {}).get("sha256")
        if not digest:
            with TemporaryDirectory() as tmp:
                path = Path(tmp) / key.rsplit("/", 1)[-1]
                self._call(f"downloading {key}", self.client.download_file, Bucket=self.location.bucket, Key=key,
                           Filename=str(path))  # fmt: skip
                admit(path, key.split("/")[-2], f"s3://{self.location.bucket}/{key}")
                digest = Artifact.of(path).sha256
        self._digests[key, etag] = str(digest)
        return str(digest)

    def _rebuild_repodata(self, subdir: str) -> int:
        """Returns how many packages the index lists."""
        key = self.location.key(subdir, "repodata.json")
        where = f"s3://{self.location.bucket}/{key}"
        count = 0

        def update(body: bytes | None) -> bytes | None:
            nonlocal count
            current = rd.parse(body, subdir, where)
            present = {k.split("/")[1]: etag for k, etag in self._listing(subdir).items()
                       if k.count("/") == 1 and rd.is_package(k)}  # fmt: skip
            rebuilt = rd.empty(subdir)
            rebuilt.update({k: v for k, v in current.items() if k not in ("packages", "packages.conda")})
            for name, etag in present.items():
                object_key = self.location.key(subdir, name)
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

        self._swap([key], update, f"{subdir}/repodata.json")
        return count

    def _rebuild_project_page(self, project: str) -> int:
        """Returns how many wheels the page links."""
        count = 0

        def update(_body: bytes | None) -> bytes:
            nonlocal count
            present = {k.split("/")[3]: etag for k, etag in self._listing("whl", "simple", project).items()
                       if _is_wheel(k.split("/"))}  # fmt: skip
            keys = {name: self.location.key("whl", "simple", project, name) for name in present}
            for name, key in keys.items():
                check_folder(Path(name), project, f"s3://{self.location.bucket}/{key}")
            digests = {name: self._sha256_of_object(keys[name], etag) for name, etag in present.items()}
            count = len(digests)
            return pep503.project_page(project, digests).encode()

        self._swap(self._page_keys(project), update, f"whl/simple/{project}/")
        return count

    def _root_page(self) -> bytes:
        projects = {k.split("/")[2] for k in self._listing("whl", "simple") if _is_wheel(k.split("/"))}
        return pep503.root_page(projects).encode()


def refuse_nightlies(artifacts: Sequence[Artifact]) -> None:
    """Nightlies (channels/nightly.py) go to a local channel only, for now: an S3 channel lists releases only."""
    found = [a.path.name for a in artifacts if nightly.is_nightly(a.path.name)]
    if found:
        raise UserError(f"publish: {', '.join(found)} are nightlies (a .devN version), which are published to a local "
                        "channel directory only for now, not to S3; nothing was published.")  # fmt: skip


def _is_wheel(parts: Sequence[str]) -> bool:
    """A relative key (split at '/') of a wheel: whl/simple/<project>/<file>.whl."""
    return len(parts) == 4 and parts[0] == "whl" and parts[1] == "simple" and parts[3].endswith(".whl")
