"""Smoke checks of what the installed distribution declares: its metadata as pip and importlib.metadata read it, and
its console scripts, each one's entry point imported as the script's launcher would (``torchrun`` fails for a user
when ``torch.distributed.run`` does not import). Standard library only at module level.
"""

from __future__ import annotations

import configparser
import importlib
import os
from collections.abc import Callable
from pathlib import Path

from .smoke_base import CheckFailed, Expect, Outcome, torch_folder

SCRIPT_GROUPS = ("console_scripts", "gui_scripts")


def check_dist_info(expect: Expect) -> Outcome:
    """What pip show/uninstall and importlib.metadata read: the version, RECORD's files all present, every
    License-File present: in the dist-info's licenses/ from Metadata-Version 2.4 (PEP 639), in the dist-info itself
    before (setuptools wrote License-File: LICENSE beside METADATA, as torch 1.9 to 2.12 have it)."""
    import importlib.metadata as metadata

    dist = metadata.distribution("torch")
    problems = []
    if dist.version != expect.version:
        problems.append(f"importlib.metadata says torch {dist.version}, the Plan {expect.version}")
    files = list(dist.files or [])
    gone = not_there([str(f.locate()) for f in files])
    absent = [str(f) for f, g in zip(files, gone) if g]  # noqa: B905 (zip's strict is 3.10+: this runs on the cell's Python)
    if not files:
        problems.append("the dist-info has no RECORD (pip cannot uninstall it)")
    if absent:
        problems.append(f"{len(absent)} files of RECORD are not there: {', '.join(absent[:5])}")
    fields = dist.metadata.get_all("License-File") or []
    record = next((f for f in files if f.name == "METADATA" and f.parent.name.endswith(".dist-info")), None)
    if files and record is None:
        problems.append("RECORD does not list the dist-info's METADATA")
    folder = Path(str(record.locate())).parent if record is not None else None
    pep639 = tuple(int(n) for n in (dist.metadata["Metadata-Version"] or "1.0").split(".")[:2]) >= (2, 4)
    where = "licenses/" if pep639 else ""
    missing = [f for f in fields if folder is not None and not (folder / where / f).is_file()]
    if missing:
        place = "licenses/" if pep639 else "the dist-info"
        problems.append(f"{len(missing)} License-File fields name no file in {place}: {', '.join(missing[:3])}")
    if problems:
        raise CheckFailed("; ".join(problems))
    installer = (dist.read_text("INSTALLER") or "no INSTALLER").strip()
    place = "the dist-info's licenses/" if pep639 else "the dist-info"
    licensed = f"{len(fields)} License-File fields, each in {place}" if fields else "no License-File"
    return Outcome("passed", f"torch {dist.version} (installer: {installer}): {len(files):,} files in RECORD, every "
                   f"one present; {licensed}")  # fmt: skip


def not_there(paths: list[str]) -> list[bool]:
    """For each of ``paths``, whether nothing is there (os.path.exists false), by one listing per folder: under Wine
    a stat costs ~0.4 ms (each one walks the path's folders), 5 s for torch's 12,000 files against 0.5 s listed.
    Names compare as the file system does (os.path.normcase: case-insensitive on Windows); a symbolic link counts
    where its target is there."""
    listed: dict[str, set[str]] = {}
    answers = []
    for path in paths:
        folder, name = os.path.split(path)
        key = os.path.normcase(folder)
        if key not in listed:
            try:
                with os.scandir(folder or ".") as entries:
                    there = [e.name for e in entries if not e.is_symlink() or os.path.exists(e.path)]
                listed[key] = {os.path.normcase(n) for n in there}
            except OSError:
                listed[key] = set()
        answers.append(os.path.normcase(name) not in listed[key])
    return answers


def declared_scripts(dist_info: Path) -> dict[str, str]:
    """The console and GUI scripts a dist-info's entry_points.txt declares: name -> ``module:attr`` (extras cut)."""
    path = dist_info / "entry_points.txt"
    if not path.is_file():
        return {}
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    return {
        name: value.split("[", 1)[0].strip()
        for group in SCRIPT_GROUPS if parser.has_section(group)
        for name, value in parser.items(group)
    }  # fmt: skip


def load_entry_point(target: str) -> None:
    """Import ``module:attr.attr`` as a script launcher does; raises what the import or the lookup raises."""
    module_name, _, attrs = target.partition(":")
    found = importlib.import_module(module_name.strip())
    for attr in filter(None, attrs.strip().split(".")):
        found = getattr(found, attr)


def check_console_scripts(expect: Expect) -> Outcome:
    """Every console script torch declares loads its entry point, except those the Plan records as upstream's known
    faults (``--expect-broken-scripts``: torchfrtrace 2.5-2.9 names a module its wheel lacks); one of those that loads
    is said, not failed."""
    folder = torch_folder()
    infos = sorted(folder.parent.glob("torch-*.dist-info"))
    if not infos:
        raise CheckFailed(f"no torch-*.dist-info beside {folder}")
    scripts = declared_scripts(infos[-1])
    if not scripts:
        return Outcome("passed", "torch declares no console scripts")
    errors: dict[str, str] = {}
    for name, target in scripts.items():
        try:
            load_entry_point(target)
        except Exception as exc:  # what the user's launcher would print instead of running
            errors[name] = f"{name} ({target}): {type(exc).__name__}: {exc}"
    unexpected = [said for name, said in errors.items() if name not in expect.broken_scripts]
    if unexpected:
        raise CheckFailed("; ".join(unexpected))
    loaded = [name for name in scripts if name not in errors]
    message = f"{len(loaded)} of {len(scripts)} console scripts load their entry point: {', '.join(loaded) or 'none'}"
    known = [errors[name] for name in scripts if name in errors]
    if known:
        message += f"; upstream's known faults, as recorded: {'; '.join(known)}"
    fixed = [name for name in expect.broken_scripts if name in scripts and name not in errors]
    if fixed:
        message += f"; recorded as broken but loads: {', '.join(fixed)}"
    return Outcome("passed", message)


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "dist-info": check_dist_info,
    "console scripts": check_console_scripts,
}
