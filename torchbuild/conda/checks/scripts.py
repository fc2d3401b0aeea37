"""TB110: every console and GUI script the packaged wheel declares (its .dist-info/entry_points.txt) is in the
package where conda puts scripts: ``bin/<name>``, or on Windows ``Scripts\\<name>.exe``, a launcher that starts the
environment's own ``python.exe`` (``pythonw.exe`` for a GUI script) and calls the declared function
(wheel/install.py makes them with installer). Without it ``torchrun`` is missing from a conda environment."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import PurePosixPath

from torchbuild.conda.archive import CondaArchive, Member, Outcome, package_check
from torchbuild.host import archives

SHEBANG = re.compile(rb"#!([^\r\n]*)\r?\n(?=PK\x03\x04)")


def _declared(pkg: CondaArchive) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """(script, module, function, section) of every entry point script the payload's wheels declare."""
    from installer.utils import parse_entrypoints  # installer: only where a package is checked

    found: list[tuple[str, str, str, str]] = []
    problems: list[str] = []
    for member in pkg.files():
        if not member.name.endswith(".dist-info/entry_points.txt"):
            continue
        try:
            found += list(parse_entrypoints(member.data.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, AssertionError) as exc:
            problems.append(f"{member.name} cannot be read: {exc or 'an entry point names no module:function'}")
    return found, problems


def launcher_problems(member: Member, module: str, function: str, section: str) -> list[str]:
    """What is wrong with a Windows launcher: the shebang it starts and the function its script calls."""
    from torchbuild.wheel.install import LAUNCHER_MAIN, WINDOWS_INTERPRETER  # loads installer

    data = member.data
    found = SHEBANG.findall(data)
    try:
        with archives.open_zip(io.BytesIO(data)) as archive:
            code = archive.read(LAUNCHER_MAIN).decode("utf-8")
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        return [f"{member.name} is not a script launcher (no {LAUNCHER_MAIN} appended: {exc})"]
    wanted = WINDOWS_INTERPRETER.replace("python.exe", "pythonw.exe" if section == "gui" else "python.exe")
    problems = []
    if not found or found[-1].decode("utf-8", "replace") != wanted:
        said = found[-1].decode("utf-8", "replace") if found else "nothing"
        problems.append(f"{member.name} starts {said}, not the environment's {wanted}")
    calls = f"from {module} import {function.split('.')[0]}" in code and f"sys.exit({function}())" in code
    if not calls:
        problems.append(f"{member.name} does not call {module}:{function}")
    return problems


def tb110_note(pkg: CondaArchive) -> str:
    declared, _ = _declared(pkg)
    where = "Scripts\\{}.exe" if pkg.is_windows else "bin/{}"
    return ", ".join(where.format(script) for script, *_ in sorted(declared))


@package_check("TB110", "the wheel's console scripts are in the package", note=tb110_note)
def tb110(pkg: CondaArchive) -> Outcome:
    declared, problems = _declared(pkg)
    if not declared and not problems:
        return "the packaged wheel declares no console or GUI scripts"
    files = {m.name: m for m in pkg.files()}
    for script, module, function, section in declared:
        name = str(PurePosixPath("Scripts", f"{script}.exe") if pkg.is_windows else PurePosixPath("bin", script))
        member = files.get(name)
        if member is None:
            problems.append(f"{name} is missing ({section} script {script} = {module}:{function})")
        elif pkg.is_windows:
            problems += launcher_problems(member, module, function, section)
    return problems
