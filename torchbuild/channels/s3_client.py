"""The S3 side of the S3 channel: the bucket location, the boto3 client (the standard credential chain, retries),
boto3's errors as messages a user can act on, and upload progress. torchbuild/channels/s3.py is the channel."""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Any
from urllib.parse import urlsplit

from torchbuild.channels.secrets import redact, register
from torchbuild.config.channel_spec import Location
from torchbuild.errors import UserError
from torchbuild.host.console import console

MB = 1 << 20
RETRIES = 8  # merge attempts per index file; and botocore's attempts per request unless AWS_MAX_ATTEMPTS says

CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def make_client() -> Any:
    try:
        session = module("boto3.session").Session()
        credentials = session.get_credentials()
    except boto_errors() as exc:  # e.g. a profile that does not exist
        raise UserError(redact(f"AWS configuration: {exc}")) from None
    if credentials is None:
        raise UserError(
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
            "or run where an instance role gives them"
        )
    frozen = credentials.get_frozen_credentials()
    register(frozen.access_key, frozen.secret_key, frozen.token)
    config = module("botocore.config").Config(
        retries={"mode": "standard", **({} if os.environ.get("AWS_MAX_ATTEMPTS") else {"max_attempts": RETRIES})},
        connect_timeout=10,
        read_timeout=120,
        user_agent_extra="torchbuild",
    )
    try:
        return session.client("s3", region_name=session.region_name or "us-east-1", config=config)
    except boto_errors() as exc:  # e.g. an endpoint URL that is not one
        raise UserError(redact(f"AWS configuration: {exc}")) from None


def http_url(endpoint: str, location: Location) -> str:
    """The channel's URL for installers: AWS's virtual-host address, or the path-style one of another endpoint."""
    endpoint = endpoint.rstrip("/")
    host = urlsplit(endpoint).netloc
    if host.endswith("amazonaws.com"):
        base = f"https://{location.bucket}.{host}"
        return f"{base}/{location.prefix}" if location.prefix else base
    base = f"{endpoint}/{location.bucket}"
    return f"{base}/{location.prefix}" if location.prefix else base


def module(name: str) -> Any:
    """boto3 ships no type information: its modules are used as Any."""
    return importlib.import_module(name)


def boto_errors() -> tuple[type[Exception], type[Exception]]:
    errors = module("botocore.exceptions")
    return errors.ClientError, errors.BotoCoreError


def error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def describe_error(exc: Exception, doing: str, url: str, bucket: str, endpoint: str) -> UserError:
    """A boto3/botocore error as the one line a user can act on (credentials never shown)."""
    errors = module("botocore.exceptions")
    code = error_code(exc)
    if code in ("NoSuchBucket", "404") and doing == "checking the bucket":
        message = f"bucket '{bucket}' does not exist at {endpoint} (create it first; publishing never does)"
    elif code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "403",
                  "AccessDenied", "InvalidClientTokenId"):  # fmt: skip
        message = (
            f"the AWS credentials were refused for bucket '{bucket}' ({code}) while {doing}: check "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, and that they may read and write the bucket"
        )
    elif isinstance(exc, errors.EndpointConnectionError):
        message = f"cannot reach the S3 endpoint {endpoint} while {doing} (AWS_ENDPOINT_URL_S3, network)"
    elif isinstance(exc, errors.NoCredentialsError):
        message = "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
    else:
        message = f"S3 error while {doing} ({code or type(exc).__name__}): {exc}"
    return UserError(redact(f"{url}: {message}"))


class Progress:
    """boto3 calls this from its upload threads with the bytes sent; a line every 10%."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size, self.sent, self.shown = name, size, 0, -1
        self.lock = threading.Lock()

    def __call__(self, sent: int) -> None:
        with self.lock:
            self.sent += sent
            tenth = min(10, self.sent * 10 // max(self.size, 1))
            if tenth > self.shown:
                self.shown = tenth
                console.print(f"  uploading {self.name}: {tenth * 10}% of {self.size / MB:.1f} MB")
                sys.stderr.flush()
