"""A wheel's requirements as conda dependencies: PyPI names -> conda names (the Plan's, from
torchbuild/data/pypi_to_conda.yaml), PEP 440 specifiers -> conda version specs, PEP 508 markers evaluated for the
cell's target (not for this host)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name

from torchbuild.errors import UserError
from torchbuild.knowledge.pypi_to_conda import NameRule, conda_name
from torchbuild.wheel.wheelfile import WheelInfo

OPERATOR_ORDER = {op: i for i, op in enumerate(("===", "==", "~=", ">=", ">", "!=", "<=", "<"))}  # lower bound first


@dataclass(frozen=True)
class Conversion:
    """How a cell turns a wheel's Requires-Dist into conda specs (``Plan.conda.requirements``)."""

    markers: Mapping[str, str]  # PEP 508 marker values of the target
    overrides: Mapping[str, str]  # canonical PyPI name -> the conda spec that replaces its converted pin
    names: Mapping[str, NameRule]  # canonical PyPI name -> its conda name (others keep their PyPI name)


def conda_version_spec(specifier: SpecifierSet, exact_as_prefix: bool = False) -> str:
    """PEP 440 specifiers as a conda version spec: '>=1.13.3', '1.2.*', '>=1,<2'; with ``exact_as_prefix`` an exact
    pin ==X is 'X.*' (X and any version with more parts after it: nccl 2.27.5.1 for a wheel's 2.27.5)."""
    parts: list[str] = []
    for spec in sorted(specifier, key=lambda s: (OPERATOR_ORDER.get(s.operator, 9), s.version)):
        assert isinstance(spec, Specifier)
        if exact_as_prefix and spec.operator == "==" and not spec.version.endswith(".*"):
            parts.append(f"{spec.version}.*")
        elif spec.operator == "===":
            parts.append(f"=={spec.version}")
        elif spec.operator == "==" and spec.version.endswith(".*"):
            parts.append(spec.version)
        else:
            parts.append(f"{spec.operator}{spec.version}")
    return ",".join(parts)


def requirement_to_conda(requirement: str, env: Mapping[str, str], names: Mapping[str, NameRule]) -> str | None:
    """One Requires-Dist line as a conda spec, or None when its marker excludes the cell's target."""
    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate(dict(env)):
        return None
    if req.url:
        raise ValueError(f"'{requirement}' is a direct URL reference, which a conda dependency cannot express")
    rule = conda_name(names, req.name)
    version = conda_version_spec(req.specifier, rule.exact_as_prefix) if rule.keep_versions else ""
    return f"{rule.conda} {version}" if version else rule.conda


def wheel_requires(wheel: WheelInfo, conversion: Conversion) -> tuple[str, ...]:
    """The wheel's Requires-Dist as conda specs for the cell's platform and Python, in the wheel's order, with the
    cell's requirement overrides applied."""
    env = conversion.markers
    overrides = conversion.overrides
    specs: list[str] = []
    for line in wheel.requires:
        try:
            spec = requirement_to_conda(line, env, conversion.names)
        except (InvalidRequirement, UndefinedComparison, UndefinedEnvironmentName, ValueError) as exc:
            raise UserError(f"{wheel.path}: Requires-Dist '{line}': {exc}") from None
        if spec is not None and (name := str(canonicalize_name(Requirement(line).name))) in overrides:
            spec = overrides[name]
        if spec is not None and spec not in specs:
            specs.append(spec)
    return tuple(specs)
