"""Package checks of a conda package's metadata: conda-verify's C1101-C1116 (index.json: name, version, build,
depends, license)."""

from __future__ import annotations

from typing import Any

from torchbuild.conda.archive import (
    LICENSE_FAMILIES,
    NAME,
    VERSION,
    CondaArchive,
    Outcome,
    bad_sequence,
    is_ascii,
    package_check,
)


@package_check("C1101", "index.json has a name")
def c1101(pkg: CondaArchive) -> Outcome:
    return [] if pkg.index.get("name") else ["info/index.json has no name"]


@package_check("C1102", "index.json name equals the file name's")
def c1102(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    if parts is None:
        return [f"file name {pkg.path.name} is not <name>-<version>-<build>"]
    name = pkg.index.get("name")
    return [] if name == parts[0] else [f"index.json name '{name}' but the file name says '{parts[0]}'"]


@package_check("C1103", "package name is valid")
def c1103(pkg: CondaArchive) -> Outcome:
    name = str(pkg.index.get("name", ""))
    if NAME.fullmatch(name) and not name.endswith((".", "-", "_")):
        return []
    return [f"'{name}' must match [a-z0-9_][a-z0-9_-.]* and not end in '.', '-' or '_'"]


@package_check("C1104", "index.json has a version")
def c1104(pkg: CondaArchive) -> Outcome:
    return [] if str(pkg.index.get("version", "")) else ["info/index.json has no version"]


@package_check("C1105", "version is valid")
def c1105(pkg: CondaArchive) -> Outcome:
    version = str(pkg.index.get("version", ""))
    seq = bad_sequence(version)
    if not VERSION.fullmatch(version):
        return [f"version '{version}' has characters other than letters, digits, '_' and '.'"]
    return [f"version '{version}' contains '{seq}'"] if seq else []


@package_check("C1106", "index.json version equals the file name's")
def c1106(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    version = str(pkg.index.get("version", ""))
    if parts is None or version == parts[1]:
        return []
    return [f"index.json version '{version}' but the file name says '{parts[1]}'"]


@package_check("C1107", "version does not start or end with '_' or '.'")
def c1107(pkg: CondaArchive) -> Outcome:
    version = str(pkg.index.get("version", ""))
    bad = version.startswith(("_", ".")) or version.endswith(("_", "."))
    return [f"version '{version}' starts or ends with '_' or '.'"] if bad else []


@package_check("C1108", "build_number is an integer")
def c1108(pkg: CondaArchive) -> Outcome:
    number = pkg.index.get("build_number")
    ok = isinstance(number, int) and not isinstance(number, bool)
    return [] if ok else [f"build_number is {number!r}, not an integer"]


@package_check("C1109", "build_number is not negative")
def c1109(pkg: CondaArchive) -> Outcome:
    number = pkg.index.get("build_number")
    return [f"build_number is {number}"] if isinstance(number, int) and number < 0 else []


@package_check("C1110", "build string is valid")
def c1110(pkg: CondaArchive) -> Outcome:
    build = str(pkg.index.get("build", ""))
    return [] if VERSION.fullmatch(build) else [f"build string '{build}' is not made of letters, digits, '_', '.'"]


@package_check("C1111", "index.json build string equals the file name's")
def c1111(pkg: CondaArchive) -> Outcome:
    parts = pkg.filename_parts
    build = str(pkg.index.get("build", ""))
    if parts is None or build == parts[2]:
        return []
    return [f"index.json build '{build}' but the file name says '{parts[2]}'"]


def _depends(pkg: CondaArchive) -> list[Any]:
    depends = pkg.index.get("depends")
    return list(depends) if isinstance(depends, list) else []


@package_check("C1112", "index.json has depends")
def c1112(pkg: CondaArchive) -> Outcome:
    return [] if isinstance(pkg.index.get("depends"), list) else ["info/index.json has no depends list"]


@package_check("C1113", "no empty dependency")
def c1113(pkg: CondaArchive) -> Outcome:
    return ["an empty dependency"] if any(not str(d).strip() for d in _depends(pkg)) else []


@package_check("C1114", "every dependency is a valid spec")
def c1114(pkg: CondaArchive) -> Outcome:
    from rattler import MatchSpec
    from rattler.exceptions import InvalidMatchSpecError

    problems: list[str] = []
    for dep in map(str, _depends(pkg)):
        tokens = dep.split()
        if not tokens:
            continue
        if len(tokens) > 3 or not NAME.fullmatch(tokens[0]):
            problems.append(f"'{dep}'")
            continue
        try:
            MatchSpec(dep, strict=False)
        except InvalidMatchSpecError as exc:
            problems.append(f"'{dep}': {exc}")
    return problems


@package_check("C1115", "license family is known")
def c1115(pkg: CondaArchive) -> Outcome:
    family = pkg.index.get("license_family", pkg.index.get("license"))
    if str(family).upper() in LICENSE_FAMILIES:
        return []
    return [f"license family '{family}' is not one of {', '.join(sorted(LICENSE_FAMILIES))}"]


@package_check("C1116", "index.json is ASCII")
def c1116(pkg: CondaArchive) -> Outcome:
    return [] if is_ascii(pkg.info["info/index.json"], pkg.is_windows) else ["info/index.json has non-ASCII bytes"]
