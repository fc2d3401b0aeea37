"""Static checks of built artifacts, read back from disk.

Every check has a code: conda-verify's C11xx where it checks the same thing (users who know conda-verify
recognise them; conda-verify itself is not on the package index here), and torchbuild's own TBxxx for what
conda-verify does not check: TB1xx conda package, TB2xx wheel, TB3xx solve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from torchbuild.stages import Check

# code -> what passing means (the Check's name)
CODES: Mapping[str, str] = {
    "C1101": "index.json has a name",
    "C1102": "index.json name equals the file name's",
    "C1103": "package name is valid",
    "C1104": "index.json has a version",
    "C1105": "version is valid",
    "C1106": "index.json version equals the file name's",
    "C1107": "version does not start or end with '_' or '.'",
    "C1108": "build_number is an integer",
    "C1109": "build_number is not negative",
    "C1110": "build string is valid",
    "C1111": "index.json build string equals the file name's",
    "C1112": "index.json has depends",
    "C1113": "no empty dependency",
    "C1114": "every dependency is a valid spec",
    "C1115": "license family is known",
    "C1116": "index.json is ASCII",
    "C1117": "no duplicate archive members",
    "C1118": "archive member names are ASCII",
    "C1119": "info/files is ASCII",
    "C1120": "info/files lists no info/ entries",
    "C1121": "info/files has no duplicates",
    "C1122": "every file in info/files is in the archive",
    "C1123": "every archive file is in info/files",
    "C1124": "no hard links; no symlinks in a Windows package",
    "C1125": "no conda-meta/, conda-bld/, pkgs/, envs/, .DS_Store or ~ backup files",
    "C1126": "no info/link.json in a non-noarch package",
    "C1127": "no .bat and .exe with the same name",
    "C1128": "prefix entries are ASCII",
    "C1129": "prefix entries name files in the package",
    "C1130": "prefix modes are text or binary",
    "C1131": "no binary prefix in a python package",
    "C1132": "no binary prefix in a Windows package",
    "C1133": "binary prefix placeholders are 255 bytes",
    "C1134": "no pre/post-link or pre-unlink scripts",
    "C1135": "no .egg files",
    "C1136": "no easy_install scripts",
    "C1137": "no .pth files",
    "C1138": "no .pyo files",
    "C1139": ".pyc files only under site-packages",
    "C1140": "no lib2to3 .pickle files",
    "C1141": "every .py has a .pyc (Python 2 packages)",
    "C1142": "Menu json is named after the package",
    "C1143": "at most one Menu json",
    "C1144": "Windows package arch is x86_64",
    "C1145": "every .exe/.dll/.pyd is a PE for AMD64",
    "C1146": "every file's sha256 matches info/paths.json",
    "C1147": "every file's size matches info/paths.json",
    "TB100": "the package can be read",
    "TB101": "info/paths.json lists exactly the payload",
    "TB102": "Windows install paths stay under MAX_PATH",
    "TB103": ".conda container layout (CEP 35)",
    "TB104": "the package is the one the Plan names",
    "TB201": "wheel RECORD matches every file (sha256, size)",
    "TB202": "wheel tags match the Plan",
    "TB203": "no wheel member escapes the install root",
    "TB301": "pytorch resolves to this build against the real repodata",
}

SHOWN = 5  # problems named in one check's message; the rest are counted


def result(code: str, file: Path | str, problems: Sequence[str], note: str = "") -> Check:
    """A passed Check when ``problems`` is empty (with ``note`` as its message), else a failed one naming them."""
    if not problems:
        return Check(name=CODES[code], status="passed", message=note, code=code, file=str(file))
    message = "; ".join(problems[:SHOWN])
    if len(problems) > SHOWN:
        message += f" (and {len(problems) - SHOWN} more)"
    return Check(name=CODES[code], status="failed", message=message, code=code, file=str(file))


def skipped(code: str, file: Path | str, reason: str) -> Check:
    return Check(name=CODES[code], status="skipped", message=reason, code=code, file=str(file))


def failures(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == "failed"]


def summary(failed: Sequence[Check]) -> str:
    """One line per failed check: code, file, what is wrong."""
    return "\n".join(f"  {c.code} {c.file}: {c.name}: {c.message}" for c in failed)
