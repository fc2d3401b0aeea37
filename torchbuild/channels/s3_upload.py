"""One file put into S3 under a condition: If-None-Match: * where the publisher saw no object (a concurrent publisher
that wrote the key first wins, this one is refused), If-Match on the ETag it saw where it replaces one (--replace).
boto3's upload_file (s3transfer) cannot pass either, so the multipart upload is made here: parts of ``part_size``,
four at a time, each retried by botocore's standard retry mode; the condition is on the completing request, so no
part of a refused or failed upload is ever visible (a failed one is aborted)."""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CONCURRENCY = 4


def put_file(
    client: Any,
    bucket: str,
    key: str,
    path: Path,
    *,
    extra: Mapping[str, Any],
    condition: Mapping[str, str],
    part_size: int,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Put ``path`` at ``key`` with ``extra`` (metadata, content type) when ``condition`` holds. Raises botocore's
    ClientError (PreconditionFailed: the condition did not hold) or BotoCoreError."""
    size = path.stat().st_size
    if size <= part_size:
        with path.open("rb") as body:
            client.put_object(Bucket=bucket, Key=key, Body=body, **extra, **condition)
        if progress is not None:
            progress(size)
        return
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, **extra)["UploadId"]
    try:
        offsets = range(0, size, part_size)

        def send(number: int, offset: int) -> dict[str, Any]:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read(part_size)
            answer = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
            if progress is not None:
                progress(len(data))
            return {"PartNumber": number, "ETag": answer["ETag"]}

        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            parts = list(pool.map(send, range(1, len(offsets) + 1), offsets))
        client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, **condition
        )
    except BaseException:
        with contextlib.suppress(Exception):  # best effort: the upload's parts are never visible either way
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise
