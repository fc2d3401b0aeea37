"""torchbuild/data/pypi_to_conda.yaml, parsed once: PyPI names -> conda names (with whether their pins are kept), the
PEP 508 marker values of each target platform, and where a wheel's .data/<key>/ parts go in a conda prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge import datafiles

MAPPING_FILE = "pypi_to_conda.yaml"


@dataclass(frozen=True)
class NameRule:
    conda: str
    keep_versions: bool = True
    # conda_versions: an exact pin of the wheel (==12.8.4.1) becomes the conda-forge version that packages the same
    # library release (libcublas 12.8.4.1.*; nccl's 2.27.5 is conda's 2.27.5.1, which 2.27.5.* selects too)
    exact_as_prefix: bool = False


@dataclass(frozen=True)
class WheelToConda:
    """torchbuild/data/pypi_to_conda.yaml, typed."""

    names: Mapping[str, NameRule]
    marker_environments: Mapping[str, Mapping[str, str]]
    schemes: Mapping[str, Mapping[str, str]]


def conda_name(names: Mapping[str, NameRule], pypi_name: str) -> NameRule:
    """The conda name of a PyPI project: the table's, else its PEP 503 normalised name (conda-forge's rule)."""
    key = canonicalize_name(pypi_name)
    return names.get(key, NameRule(conda=key))


def _name_rule(key: str, value: Any) -> NameRule:
    if isinstance(value, str):
        return NameRule(conda=value)
    if isinstance(value, dict) and isinstance(value.get("conda"), str):
        versions = value.get("versions", "keep")
        if versions not in ("keep", "drop"):
            raise UserError(f"{MAPPING_FILE}: names.{key}.versions is '{versions}'; valid: keep or drop.")
        return NameRule(conda=value["conda"], keep_versions=versions == "keep")
    raise UserError(f"{MAPPING_FILE}: names.{key} must be a conda name or {{conda: NAME, versions: drop}}.")


def _version_rules(raw: Any) -> dict[str, NameRule]:
    """``conda_versions``: PyPI name -> the conda package whose version matches the wheel's pin (rule ``same``: the
    wheel's version; ``append``: the wheel's plus one part), kept as ``<pin>.*``."""
    found: dict[str, NameRule] = {}
    for row in raw or ():
        if row.get("rule") not in ("same", "append") or not isinstance(row.get("conda"), str):
            raise UserError(f"{MAPPING_FILE}: conda_versions row {row!r} needs conda: NAME and rule: same or append.")
        for pypi in row.get("pypi") or ():
            found[str(canonicalize_name(str(pypi)))] = NameRule(conda=row["conda"], exact_as_prefix=True)
    return found


def _parse(raw: Any) -> WheelToConda:
    names = {str(canonicalize_name(str(k))): _name_rule(str(k), v) for k, v in raw["names"].items()}
    names.update(_version_rules(raw.get("conda_versions")))
    envs = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["marker_environments"].items()}
    schemes = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["schemes"].items()}
    return WheelToConda(names=names, marker_environments=envs, schemes=schemes)


def load() -> WheelToConda:
    return datafiles.table(MAPPING_FILE, _parse)


def marker_environment(platform: str, python: str, mapping: WheelToConda | None = None) -> dict[str, str]:
    """PEP 508 marker values of a cell's target (not of this host)."""
    mapping = mapping or load()
    if platform not in mapping.marker_environments:
        raise UserError(
            f"{MAPPING_FILE}: no marker environment for {platform}; known: {one_of(mapping.marker_environments)}."
        )
    return {
        **mapping.marker_environments[platform],
        "python_version": python,
        "python_full_version": f"{python}.0",
        "platform_release": "",
        "platform_version": "",
        "implementation_version": f"{python}.0",
        "extra": "",  # extras are dropped: an `extra == "x"` requirement never applies to the package
    }


def install_scheme(
    platform: str, site_packages: str, python: str, mapping: WheelToConda | None = None
) -> dict[str, str]:
    """Where a wheel's .data/<key>/ parts go in a conda prefix; ``{dist}`` is left for the wheel's name."""
    mapping = mapping or load()
    if platform not in mapping.schemes:
        raise UserError(f"{MAPPING_FILE}: no install scheme for {platform}; known: {one_of(mapping.schemes)}.")
    values = {"site_packages": site_packages, "python": python, "dist": "{dist}"}
    return {key: value.format(**values) for key, value in mapping.schemes[platform].items()}


