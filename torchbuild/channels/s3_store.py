"""What every S3 channel operation shares: the bucket's objects read and listed with errors that name the channel,
the layout's keys (releases' and nightlies', channels/nightly.py), and index files written with compare-and-swap
(s3.py's docstring says why)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from torchbuild.channels import nightly
from torchbuild.channels.admission import admit
from torchbuild.channels.s3_client import (
    CONFLICT,
    RETRIES,
    boto_errors,
    describe_error,
    error_code,
    http_url,
    make_client,
)
from torchbuild.config.channel_spec import parse_s3
from torchbuild.errors import UserError
from torchbuild.host.console import console
from torchbuild.results import Artifact


class S3Store:
    def __init__(self, url: str, client: Any | None = None) -> None:
        self.location = parse_s3(url)
        self.s3_url = url.rstrip("/")
        self.client = client if client is not None else make_client()
        self.url = http_url(str(self.client.meta.endpoint_url), self.location)  # what installers use
        self.nightly_url = f"{self.url}/{nightly.CONDA_ROOT}"
        self.serves_wheels = True
        self._digests: dict[tuple[str, str], str] = {}  # (key, ETag) -> sha256 of the object, for index()

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

    def _listing(self, *parts: str) -> dict[str, str]:
        """Key relative to the prefix -> ETag, of every object under ``parts`` (relative paths, '/' allowed)."""
        root = f"{self.location.prefix}/" if self.location.prefix else ""
        under = root + "".join(f"{part}/" for part in parts if part)
        return {str(obj["Key"])[len(root) :]: str(obj["ETag"]) for obj in self._list(under)}

    def check_bucket(self) -> None:
        self._call("checking the bucket", self.client.head_bucket, Bucket=self.location.bucket)

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

    # --- the layout ------------------------------------------------------------------------------------

    def _key(self, relative: str) -> str:
        """The key of a path relative to the channel (``label/nightly/linux-64/repodata.json``)."""
        return self.location.key(*relative.split("/"))

    def _repodata_key(self, conda_root: str, subdir: str) -> str:
        """A subdir's repodata.json in the channel (``conda_root`` "") or in its nightlies' (``label/nightly``)."""
        return self._key(f"{conda_root}/{subdir}/repodata.json" if conda_root else f"{subdir}/repodata.json")

    def _page_keys(self, simple: str, *parts: str) -> list[str]:
        """A PEP 503 page below the root ``simple`` (``whl/simple``, ``whl/nightly/simple``): pip asks for
        '<project>/'; a browser may ask index.html."""
        directory = self._key("/".join([simple, *parts]))
        return [directory + "/index.html", directory + "/"]

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
