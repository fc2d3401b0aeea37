"""The SBOM an artifact carries against the artifact's own files: every file it lists is there with that sha256,
and the document is valid CycloneDX 1.6 (TB206 wheel, TB109 conda package; torchbuild/sbom.py)."""

from __future__ import annotations

import hashlib
import zipfile

from torchbuild.conda.archive import CondaArchive, Outcome, package_check
from torchbuild.results import define
from torchbuild.wheel import sbom

TB206 = define("TB206", "the wheel's SBOM matches its files (path, sha256)")
INFO_MEMBER = f"info/{sbom.FILE_NAME}"


def wheel_problems(zf: zipfile.ZipFile, dist_info: str) -> list[str] | None:
    """What is wrong between the wheel's torchbuild SBOM and its members; None when it carries none."""
    member = sbom.wheel_member(dist_info)
    if member not in zf.namelist():
        return None
    names = set(zf.namelist())

    def digest(name: str) -> str | None:
        return hashlib.sha256(zf.read(name)).hexdigest() if name in names else None

    text = zf.read(member).decode("utf-8")
    return sbom.problems(text, {name: sha for name in sbom.listed_files(text) if (sha := digest(name)) is not None})


@package_check("TB109", "the package's SBOM matches its files (path, sha256)")
def tb109(pkg: CondaArchive) -> Outcome:
    text = pkg.info.get(INFO_MEMBER)
    if text is None:
        return f"no {INFO_MEMBER} (a package torchbuild did not make)"
    files = {m.name: m.sha256 for m in pkg.files()}
    problems = sbom.problems(text.decode("utf-8"), files)
    copies = [m for m in pkg.files() if m.name.endswith(f"/sboms/{sbom.FILE_NAME}")]
    digest = hashlib.sha256(text).hexdigest()
    problems += [f"{m.name} differs from {INFO_MEMBER}" for m in copies if m.sha256 != digest]
    return problems
