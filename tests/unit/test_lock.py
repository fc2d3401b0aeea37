"""The lock of the development and CI environment (.ci/constraints.txt, which .ci/run installs from): made by the
command docs/development.md gives, from the pyproject.toml it sits beside (every dependency of the package and of
its test and bench extras pinned, each pin inside pyproject's range), with an upper bound on every range; and every
module torchbuild imports is declared."""

from __future__ import annotations

import ast
import re
import sys

import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

LOCK = ROOT / ".ci" / "constraints.txt"
EXTRAS = ("test", "bench")
# import name -> distribution, where they differ
DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "elftools": "pyelftools",
    "rattler": "py-rattler",
    "rattler_build": "py-rattler-build",
    "cyclonedx": "cyclonedx-python-lib",
    "packageurl": "packageurl-python",
    "license_expression": "license-expression",
    "backports": "backports-zstd",
    "conda_package_streaming": "conda-package-streaming",
    "conda_package_handling": "conda-package-handling",
}


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *(line for extra in EXTRAS for line in project["optional-dependencies"][extra])]
    return [Requirement(line) for line in lines]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if found := re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", line):
            pins[canonicalize_name(found[1])] = Version(found[2])
    return pins


def test_the_lock_is_made_by_the_documented_command() -> None:
    command = LOCK.read_text(encoding="utf-8").splitlines()[1].removeprefix("#").strip()
    guide = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert command in guide.splitlines(), (
        f"docs/development.md does not give the command that made {LOCK.name}: {command}"
    )


def test_every_dependency_is_pinned_inside_its_range() -> None:
    pins = _pins()
    ci = {**default_environment(), "python_version": "3.11", "python_full_version": "3.11.9", "extra": ""}
    for requirement in _declared():
        if requirement.marker is not None and not requirement.marker.evaluate(ci):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in {LOCK}: refresh it with the command in docs/development.md"
        assert requirement.specifier.contains(pins[name]), (
            f"{LOCK} pins {name}=={pins[name]}, outside pyproject.toml's {requirement.specifier}: refresh it"
        )


def test_every_range_has_an_upper_bound() -> None:
    unbounded = [str(r) for r in _declared() if not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier)]
    assert unbounded == []


def test_every_imported_distribution_is_declared() -> None:
    declared = {canonicalize_name(r.name) for r in _declared()}
    local = {p.stem for folder in ("torchbuild", "bench", "scripts") for p in (ROOT / folder).rglob("*.py")}
    local |= {"torchbuild", "torch", "uv"}  # bench/ and scripts/ import their siblings by name
    missing = set()
    for path in [*(ROOT / "torchbuild").rglob("*.py"), *(ROOT / "bench").glob("*.py"), ROOT / "pipeline.py"]:
        if "resources" in path.parts:  # the smoke checks run inside the environment under test
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in local or top == "compression":
                    continue
                if canonicalize_name(DISTRIBUTIONS.get(top, top)) not in declared:
                    missing.add(f"{top} ({path.relative_to(ROOT)})")
    assert sorted(missing) == []
