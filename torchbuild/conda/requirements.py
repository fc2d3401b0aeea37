"""A wheel's requirements as conda dependencies: PyPI names -> conda names (torchbuild/data/pypi_to_conda.yaml),
PEP 440 specifiers -> conda version specs, PEP 508 markers evaluated for the cell's target (not for this host)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchbuild.config import datafiles
from torchbuild.errors import StageFailed, UserError, one_of
from torchbuild.wheel.wheelfile import WheelInfo

if TYPE_CHECKING:
    from torchbuild.plan import Plan

MAPPING_FILE = "pypi_to_conda.yaml"
OPERATOR_ORDER = {op: i for i, op in enumerate(("===", "==", "~=", ">=", ">", "!=", "<=", "<"))}  # lower bound first


@dataclass(frozen=True)
class NameRule:
    conda: str
    keep_versions: bool = True


@dataclass(frozen=True)
class WheelToConda:
    """torchbuild/data/pypi_to_conda.yaml, typed."""

    names: Mapping[str, NameRule]
    marker_environments: Mapping[str, Mapping[str, str]]
    schemes: Mapping[str, Mapping[str, str]]

    def conda_name(self, pypi_name: str) -> NameRule:
        key = canonicalize_name(pypi_name)
        return self.names.get(key, NameRule(conda=key))


def _name_rule(key: str, value: Any) -> NameRule:
    if isinstance(value, str):
        return NameRule(conda=value)
    if isinstance(value, dict) and isinstance(value.get("conda"), str):
        versions = value.get("versions", "keep")
        if versions not in ("keep", "drop"):
            raise UserError(f"{MAPPING_FILE}: names.{key}.versions is '{versions}'; valid: keep or drop.")
        return NameRule(conda=value["conda"], keep_versions=versions == "keep")
    raise UserError(f"{MAPPING_FILE}: names.{key} must be a conda name or {{conda: NAME, versions: drop}}.")


def _parse(raw: Any) -> WheelToConda:
    names = {str(canonicalize_name(str(k))): _name_rule(str(k), v) for k, v in raw["names"].items()}
    envs = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["marker_environments"].items()}
    schemes = {str(k): {str(a): str(b) for a, b in v.items()} for k, v in raw["schemes"].items()}
    return WheelToConda(names=names, marker_environments=envs, schemes=schemes)


def load_mapping() -> WheelToConda:
    return datafiles.table(MAPPING_FILE, _parse)


def marker_environment(platform: str, python: str, mapping: WheelToConda | None = None) -> dict[str, str]:
    """PEP 508 marker values of a cell's target (not of this host)."""
    mapping = mapping or load_mapping()
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
    mapping = mapping or load_mapping()
    if platform not in mapping.schemes:
        raise UserError(f"{MAPPING_FILE}: no install scheme for {platform}; known: {one_of(mapping.schemes)}.")
    values = {"site_packages": site_packages, "python": python, "dist": "{dist}"}
    return {key: value.format(**values) for key, value in mapping.schemes[platform].items()}


def conda_version_spec(specifier: SpecifierSet) -> str:
    """PEP 440 specifiers as a conda version spec: '>=1.13.3', '1.2.*', '>=1,<2'."""
    parts: list[str] = []
    for spec in sorted(specifier, key=lambda s: (OPERATOR_ORDER.get(s.operator, 9), s.version)):
        assert isinstance(spec, Specifier)
        if spec.operator == "===":
            parts.append(f"=={spec.version}")
        elif spec.operator == "==" and spec.version.endswith(".*"):
            parts.append(spec.version)
        else:
            parts.append(f"{spec.operator}{spec.version}")
    return ",".join(parts)


def requirement_to_conda(requirement: str, env: Mapping[str, str], mapping: WheelToConda) -> str | None:
    """One Requires-Dist line as a conda spec, or None when its marker excludes the cell's target."""
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate(dict(env)):
        return None
    if req.url:
        raise ValueError(f"'{requirement}' is a direct URL reference, which a conda dependency cannot express")
    rule = mapping.conda_name(req.name)
    version = conda_version_spec(req.specifier) if rule.keep_versions else ""
    return f"{rule.conda} {version}" if version else rule.conda


def wheel_requires(
    wheel: WheelInfo, plan: Plan, mapping: WheelToConda | None = None, stage: str = "conda"
) -> tuple[str, ...]:
    """The wheel's Requires-Dist as conda specs for the cell's platform and Python, in the wheel's order, with the
    Plan's requirement overrides applied."""
    mapping = mapping or load_mapping()
    env = plan.conda.marker_environment
    overrides = plan.conda.requirement_overrides
    specs: list[str] = []
    for line in wheel.requires:
        try:
            spec = requirement_to_conda(line, env, mapping)
        except (InvalidRequirement, UndefinedComparison, UndefinedEnvironmentName, ValueError) as exc:
            raise StageFailed(stage, f"{wheel.path}: Requires-Dist '{line}': {exc}") from None
        if spec is not None and (name := str(canonicalize_name(Requirement(line).name))) in overrides:
            spec = overrides[name]
        if spec is not None and spec not in specs:
            specs.append(spec)
    return tuple(specs)
