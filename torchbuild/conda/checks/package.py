"""Every package check of a conda package (.conda or .tar.bz2): conda-verify's C11xx and torchbuild's TB1xx, in
code order. The checks themselves are in metadata.py, content.py, sbom_match.py and scripts.py."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from torchbuild.conda.archive import PACKAGE_CHECKS, TB100, CondaArchive, PackageUnreadable, read_package
from torchbuild.conda.checks import content, metadata, sbom_match, scripts
from torchbuild.results import Check, result, skipped

# Importing these modules is what registers their checks.
MODULES = (metadata, content, sbom_match, scripts)


def run_checks(pkg: CondaArchive) -> list[Check]:
    checks: list[Check] = []
    for check in sorted(PACKAGE_CHECKS, key=lambda c: c.code):
        started = time.perf_counter()
        outcome = check.run(pkg)
        if isinstance(outcome, str):
            made = skipped(check.code, pkg.path, outcome)
        else:
            note = check.note(pkg) if check.note is not None and not outcome else ""
            made = result(check.code, pkg.path, outcome, note)
        checks.append(dataclasses.replace(made, duration=time.perf_counter() - started))
    return checks


def check_package(path: Path) -> list[Check]:
    """All package checks of the conda package at ``path``; an unreadable file gives one failed TB100."""
    try:
        pkg = read_package(path)
    except PackageUnreadable as exc:
        return [result(TB100, path, [str(exc)])]
    return [result(TB100, path, [], f"{pkg.format}, {len(pkg.files()):,} payload files"), *run_checks(pkg)]
