"""TB208: every console script a wheel declares names a module the wheel carries, read from the archive alone.

The smoke's "console scripts" check imports each entry point in a fresh environment; this is its static twin, for
every cell (the smoke is skipped where no environment can run: Python 3.6, 3.7 and 3.14 on win-64 here). A module
the wheel does not carry (torch 2.5-2.9's torchfrtrace names pytorch's source-tree ``tools`` package) stops the
launcher with ModuleNotFoundError; a module it carries may still fail on its own imports (1.x's caffe2 converters
need protobuf), which only the smoke sees. ``known_faults`` are the scripts the caller records as upstream's faults:
said, not failed.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from pathlib import Path

from torchbuild.results import Check, define, result
from torchbuild.wheel import wheelfile

TB208 = define("TB208", "every console script names a module the wheel carries")
SCRIPT_GROUPS = ("console_scripts", "gui_scripts")
# <name>.data/purelib/ and <name>.data/platlib/ install into the same root as the wheel's top level
_SCHEME_ROOT = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
_EXTENSION = re.compile(r"\.(?:[A-Za-z0-9_.-]+\.)?(?:pyd|so)$")  # c.pyd, c.cp312-win_amd64.pyd, c.abi3.so


def installed_paths(members: Iterable[str]) -> set[str]:
    """The wheel's members as paths under the install root (a .data/purelib or platlib prefix removed)."""
    return {_SCHEME_ROOT.sub("", member) for member in members}


def carries_module(paths: set[str], module: str) -> bool:
    """Whether ``module`` (a.b.c) is a file or package among ``paths``: a/b/c.py, .pyc, an extension, or a/b/c/."""
    stem = module.replace(".", "/")
    if {f"{stem}.py", f"{stem}.pyc", f"{stem}/__init__.py"} & paths:
        return True
    return any(
        (p.startswith(stem + ".") and _EXTENSION.search(p[len(stem) :])) or p.startswith(stem + "/") for p in paths
    )


def script_check(path: Path, known_faults: Collection[str] = ()) -> Check:
    """TB208 for the wheel at ``path``: passed naming each script and its module, failed naming each script whose
    module is missing (unless it is one of ``known_faults``)."""
    try:
        info = wheelfile.read_wheel(path)
        with wheelfile.open_wheel(path) as archive:
            paths = installed_paths(archive.namelist())
    except wheelfile.WheelError as exc:
        return result(TB208, path, [str(exc)])
    scripts = {
        name: target.split("[", 1)[0].strip()
        for group in SCRIPT_GROUPS
        for name, target in info.entry_points.get(group, {}).items()
    }
    if not scripts:
        return result(TB208, path, [], f"{info.name} declares no console scripts")
    missing = {name: target for name, target in scripts.items() if not carries_module(paths, _module(target))}
    problems = [
        f"{name}: its entry point {target} names a module the wheel does not carry "
        f"({_module(target).replace('.', '/')}.py or a package or extension of that name): `{name}` would stop "
        "with ModuleNotFoundError"
        for name, target in missing.items()
        if name not in known_faults
    ]
    carried = [f"{name} ({target})" for name, target in scripts.items() if name not in missing]
    named = ", ".join(carried) or "none"
    note = f"{len(carried)} of {len(scripts)} console scripts name a module in the wheel: {named}"
    recorded = [f"{name} ({_module(target)} is not in the wheel)" for name, target in missing.items()]
    if recorded and not problems:
        note += f"; upstream's known faults, as recorded: {', '.join(recorded)}"
    present = [name for name in scripts if name in known_faults and name not in missing]
    if present:
        note += f"; recorded as broken, module in the wheel (the smoke tells whether it loads): {', '.join(present)}"
    return result(TB208, path, problems, note)


def _module(target: str) -> str:
    return target.partition(":")[0].strip()
