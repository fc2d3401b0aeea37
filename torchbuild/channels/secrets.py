"""Credentials never reach a message, a log or a report: every text a channel shows goes through ``redact``."""

from __future__ import annotations

import os

# The standard variables whose values are secret (an access key id is not a password, but it names the account).
SECRET_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ANACONDA_API_TOKEN")
MASK = "***"
_registered: set[str] = set()


def register(*secrets: str | None) -> None:
    """Also redact these values (credentials read from a profile or a config file rather than the environment)."""
    _registered.update(s for s in secrets if s and len(s) >= 4)


def redact(text: str) -> str:
    values = _registered | {os.environ[v] for v in SECRET_VARIABLES if len(os.environ.get(v, "")) >= 4}
    for value in sorted(values, key=len, reverse=True):  # a longer secret may contain a shorter one
        text = text.replace(value, MASK)
    return text
