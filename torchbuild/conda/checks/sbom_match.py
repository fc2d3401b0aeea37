"""TB109: the SBOM a conda package carries against the package's own files: every file it lists is there with that
sha256, and the document is valid CycloneDX 1.6 (torchbuild/wheel/sbom.py; the wheel's is TB206, wheel/checks.py)."""

from __future__ import annotations

import hashlib

from torchbuild.conda.archive import CondaArchive, Outcome, package_check
from torchbuild.wheel import sbom

INFO_MEMBER = f"info/{sbom.FILE_NAME}"


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
