"""The CycloneDX SBOM a repaired wheel and its conda package carry (the one wrapper of cyclonedx-python-lib).

One document per artifact, ``torchbuild.cdx.json``: in a wheel at ``<name>.dist-info/sboms/`` (PEP 770, beside
auditwheel's own on Linux), in a conda package in ``info/`` and in place of the wheel's copy in the payload, listing
what that package holds. It names:

- torch itself: ``pkg:pypi/torch@<version>``, with its source (the input wheel's URL and sha256, or the checkout's
  git commit);
- each vendored file: its path in the artifact, sha256, PE FileVersion and Authenticode signer, nested in the
  component it came from: the provider wheel (purl with its version, sha256, where pip found it, its license) or
  the folder it was copied from;
- each declared requirement whose wheel provides libraries the artifact loads but does not hold (the nvidia-* wheels
  of a linux CUDA build, mkl of torch 2.3.x on Windows): a required dependency of torch, with its purl, the sha256
  of the wheel that the pin resolves to for the target, the Requires-Dist line and the library files it installs.

The document is deterministic: its time is the cell's epoch (provenance.py), its serial number a UUID derived
from its content, and every reference is named explicitly.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchbuild.config import nesting
from torchbuild.knowledge.cuda_wheels import RequirementWheel
from torchbuild.wheel.provenance import SourceInfo
from torchbuild.wheel.repair_report import Vendored

FILE_NAME = "torchbuild.cdx.json"
TOOL = "torchbuild"
NAMESPACE = uuid.UUID("3b0c5a57-3f7c-4d5e-9a52-0c1f8f2f3a11")  # fixed: serial numbers derive from the content
PREFIX = "torchbuild:"  # of the properties this document sets


def wheel_member(dist_info: str) -> str:
    return f"{dist_info}/sboms/{FILE_NAME}"


@dataclass(frozen=True)
class Subject:
    """What the document is about: the artifact, and the torch it packages."""

    artifact: str  # the wheel's or package's file name
    name: str  # "torch"
    version: str  # as the wheel names it (2.5.1+cpu)
    source: SourceInfo


def _sha(hexdigest: str) -> Any:
    from cyclonedx.model import HashAlgorithm, HashType

    return HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)


def _properties(values: Mapping[str, str]) -> list[Any]:
    from cyclonedx.model import Property

    return [Property(name=PREFIX + key, value=value) for key, value in values.items() if value]


def _licenses(text: str) -> list[Any]:
    from cyclonedx.model.license import DisjunctiveLicense, LicenseAcknowledgement, LicenseExpression
    from license_expression import ExpressionError, get_spdx_licensing

    if not text:
        return []
    try:
        get_spdx_licensing().parse(text, validate=True, strict=True)
        return [LicenseExpression(text, acknowledgement=LicenseAcknowledgement.DECLARED)]
    except ExpressionError:
        return [DisjunctiveLicense(name=text[:200], acknowledgement=LicenseAcknowledgement.DECLARED)]


def _subject(subject: Subject) -> Any:
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.component import Commit, Component, ComponentType, Pedigree
    from packageurl import PackageURL

    purl = PackageURL("pypi", name=subject.name, version=subject.version, qualifiers={"file_name": subject.artifact})
    source = subject.source
    references: list[Any] = []
    pedigree = None
    if source.kind == "wheel" and "://" in source.origin:
        references.append(
            ExternalReference(
                type=ExternalReferenceType.DISTRIBUTION,
                url=XsUri(source.origin),
                hashes=[_sha(source.sha256)] if source.sha256 else [],
            )
        )
    if source.commit:
        pedigree = Pedigree(commits=[Commit(uid=source.commit)])
        if "://" in source.origin:
            references.append(ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(source.origin)))
    return Component(
        type=ComponentType.LIBRARY,
        name=subject.name,
        version=subject.version,
        purl=purl,
        bom_ref=purl.to_string(),
        external_references=references,
        pedigree=pedigree,
        properties=_properties(
            {
                "source": source.origin,
                "source_sha256": source.sha256,
                "commit": source.commit,
                "epoch_from": source.epoch_from,
            }
        ),
    )


def _origin(row: Vendored) -> Any:
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    if row.origin_name:
        purl = PackageURL(
            "pypi",
            name=row.origin_name,
            version=row.origin_version,
            qualifiers={"file_name": row.origin.removeprefix("wheel ")},
        )
        distribution = ExternalReferenceType.DISTRIBUTION
        hashes = [_sha(row.origin_sha256)] if row.origin_sha256 else []
        url = row.origin_url
        references = [ExternalReference(type=distribution, url=XsUri(url), hashes=hashes)] if url else []
        return Component(
            type=ComponentType.LIBRARY,
            name=row.origin_name,
            version=row.origin_version,
            purl=purl,
            bom_ref=purl.to_string(),
            hashes=[_sha(row.origin_sha256)] if row.origin_sha256 else [],
            licenses=_licenses(row.license),
            external_references=references,
            properties=_properties({"provider": row.provider}),
        )
    return Component(
        type=ComponentType.LIBRARY,
        name=row.provider,
        bom_ref=f"folder:{row.provider}:{row.origin}",
        licenses=_licenses(row.license),
        properties=_properties({"provider": row.provider, "copied_from": row.origin}),
    )


def _file(row: Vendored, path: str) -> Any:
    from cyclonedx.model.component import Component, ComponentType

    return Component(
        type=ComponentType.FILE,
        name=path,
        version=row.version or None,
        bom_ref=f"file:{path}",
        hashes=[_sha(row.sha256)],
        properties=_properties({"path": path, "FileVersion": row.version or "", "signer": row.signer}),
    )


def _required(wheel: RequirementWheel) -> Any:
    from cyclonedx.model.component import Component, ComponentScope, ComponentType
    from packageurl import PackageURL

    purl = PackageURL("pypi", name=wheel.name, version=wheel.version, qualifiers={"file_name": wheel.file})
    return Component(
        type=ComponentType.LIBRARY,
        name=wheel.name,
        version=wheel.version,
        purl=purl,
        bom_ref=purl.to_string(),
        scope=ComponentScope.REQUIRED,
        hashes=[_sha(wheel.sha256)],
        properties=_properties({"declared_by": wheel.requirement, "libraries": ", ".join(wheel.libraries)}),
    )


def build(
    subject: Subject,
    vendored: Sequence[Vendored],
    epoch: int,
    path_prefix: str = "",
    requirements: Sequence[RequirementWheel] = (),
) -> str:
    """The document as JSON text; each vendored file's path is ``path_prefix`` + its path in the wheel;
    ``requirements``: the declared requirements that provide libraries, listed as torch's dependencies."""
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.tool import ToolRepository
    from cyclonedx.output.json import JsonV1Dot6

    from torchbuild import __version__

    torch = _subject(subject)
    tool = Component(type=ComponentType.APPLICATION, name=TOOL, version=__version__, bom_ref=f"tool:{TOOL}")
    bom = Bom(
        metadata=BomMetaData(
            component=torch,
            tools=ToolRepository(components=[tool]),
            timestamp=datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc),
        )
    )
    origins: dict[str, Any] = {}
    files = []
    for row in sorted(vendored, key=lambda r: r.path):
        origin = _origin(row)
        if origin.bom_ref.value == torch.bom_ref.value:
            # The wheel's own upstream file (what a companion's wheel bundles): a ref of its own, else cyclonedx
            # renames one of the two to a random BomRef and the document, and the wheel, differ on every run.
            origin.bom_ref.value = f"{origin.bom_ref.value}#upstream-wheel"
        origin = origins.setdefault(str(origin.bom_ref.value), origin)
        file = _file(row, path_prefix + row.path)
        origin.components.add(file)
        files.append(file)
    for origin in origins.values():
        bom.components.add(origin)
    required = [_required(wheel) for wheel in sorted(requirements, key=lambda w: w.name)]
    for component in required:
        bom.components.add(component)
    bom.register_dependency(torch, [*files, *required])
    bom.serial_number = uuid.UUID(int=0)
    body = JsonV1Dot6(bom).output_as_string(indent=2)
    bom.serial_number = uuid.uuid5(NAMESPACE, body)
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def schema_problem(text: str) -> str | None:
    """Why ``text`` is not a valid CycloneDX 1.6 document, or None."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error)[:300]


# --- reading it back -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of ``python pipeline.py sbom``: a component as a person reads it."""

    component: str
    version: str
    sha256: str
    origin: str  # the package or folder it came from
    license: str
    signer: str
    is_file: bool


def _props(component: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(p["name"]).removeprefix(PREFIX): str(p.get("value", ""))
        for p in component.get("properties") or ()
        if str(p.get("name", "")).startswith(PREFIX)
    }


def _sha256(component: Mapping[str, Any]) -> str:
    return next((str(h["content"]) for h in component.get("hashes") or () if h.get("alg") == "SHA-256"), "")


def _license(component: Mapping[str, Any]) -> str:
    names = []
    for entry in component.get("licenses") or ():
        names.append(
            entry.get("expression")
            or (entry.get("license") or {}).get("id")
            or (entry.get("license") or {}).get("name", "")
        )
    return " OR ".join(str(n) for n in names if n)


class ShapeError(ValueError):
    """Valid JSON, but not a CycloneDX document of the shape this module writes."""


def rows(document: Any) -> list[Row]:
    """The subject and every file, each with where it came from; ShapeError when ``document`` is not of the shape
    ``make`` writes (valid JSON of another shape: an edited or foreign file)."""
    try:
        return _rows(document)
    except (AttributeError, TypeError, KeyError, IndexError) as exc:
        raise ShapeError(f"not a CycloneDX document of the expected shape ({type(exc).__name__}: {exc})") from None


def _rows(document: Mapping[str, Any]) -> list[Row]:
    subject = (document.get("metadata") or {}).get("component") or {}
    props = _props(subject)
    found = [
        Row(
            component=str(subject.get("name", "?")),
            version=str(subject.get("version", "")),
            sha256=props.get("source_sha256", ""),
            origin=props.get("source", "") + (f" @ {props['commit'][:12]}" if props.get("commit") else ""),
            license=_license(subject),
            signer="",
            is_file=False,
        )
    ]
    for origin in document.get("components") or ():
        origin_props = _props(origin)
        if "declared_by" in origin_props:
            found.append(
                Row(
                    component=str(origin.get("name", "?")),
                    version=str(origin.get("version", "")),
                    sha256=_sha256(origin),
                    origin=f"required: {origin_props['declared_by']} ({origin_props.get('libraries', '')})",
                    license=_license(origin),
                    signer="",
                    is_file=False,
                )
            )
        folder = f"{origin.get('name', '?')} ({origin_props.get('copied_from', '')})"
        where = str(origin.get("purl", "")).split("?")[0] or folder
        for file in origin.get("components") or ():
            found.append(
                Row(
                    component=str(file.get("name", "?")),
                    version=str(file.get("version", "")),
                    sha256=_sha256(file),
                    origin=str(where),
                    license=_license(origin),
                    signer=_props(file).get("signer", ""),
                    is_file=True,
                )
            )
    return found


def listed_files(text: str) -> list[str]:
    """The paths of the files the document lists ([] when it is not JSON)."""
    try:
        return [row.component for row in rows(nesting.loads(text)) if row.is_file]
    except (ValueError, AttributeError, TypeError):
        return []


def problems(text: str, files: Mapping[str, str]) -> list[str]:
    """What is wrong between the document and the artifact's files (path -> sha256)."""
    try:
        document = nesting.loads(text)
    except ValueError as exc:
        return [f"{FILE_NAME} is not JSON: {exc}"]
    schema = schema_problem(text)
    found = [f"{FILE_NAME} is not valid CycloneDX 1.6: {schema}"] if schema else []
    try:
        listed = rows(document)
    except ShapeError as exc:
        return [*found, f"{FILE_NAME}: {exc}"]
    for row in listed:
        if not row.is_file:
            continue
        have = files.get(row.component)
        if have is None:
            found.append(f"{FILE_NAME} lists {row.component}, which is not in the artifact")
        elif have != row.sha256:
            found.append(f"{row.component}: sha256 {have[:12]}..., {FILE_NAME} says {row.sha256[:12]}...")
    return found
