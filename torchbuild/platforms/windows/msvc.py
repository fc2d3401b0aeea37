"""Visual Studio and MSVC on Windows: installs found with vswhere, their MSVC toolsets, the toolset the Plan needs,
and the environment of ``vcvarsall.bat x64 -vcvars_ver=14.xx`` captured for the build process only.

The OS calls are ``find_installs``, ``toolsets_of`` and ``capture_vcvars``; everything else reads their output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from torchbuild.config import nesting
from torchbuild.host import signals
from torchbuild.knowledge.compat import KnownBadVisualStudio, Range, version_key
from torchbuild.platforms.target import Toolchain
from torchbuild.platforms.toolchain import ToolchainError

VSWHERE_DEFAULT = r"C:\Program Files (x86)\Microsoft Visual Studio\Installer\vswhere.exe"
VSWHERE_FIX = (
    "install Visual Studio 2017 or newer (Build Tools are enough) with the 'Desktop development with C++' "
    "workload; vswhere.exe comes with its installer (or set VSWHERE to its path)"
)
# Printed between vcvarsall.bat's own output and `set`, so its banner is never read as variables.
ENV_MARKER = "===torchbuild-environment==="
_TOOLSET_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


@dataclass(frozen=True)
class VsInstall:
    """One Visual Studio installation as vswhere reports it."""

    path: str  # installationPath
    version: str  # installationVersion, e.g. 17.4.33110.190
    display_version: str  # catalog.productDisplayVersion, e.g. 17.4.2 ("" for legacy installs)
    name: str  # displayName
    legacy: bool  # VS 2015 or older: found with -legacy, no VC\Tools\MSVC layout

    @property
    def major(self) -> int:
        return version_key(self.version.split(".")[0])[0]

    @property
    def update(self) -> str:
        """The product version a user sees (17.4.2); for legacy installs the installation version."""
        match = re.match(r"\d+(\.\d+)*", self.display_version or self.version)
        return match.group(0) if match else self.version


@dataclass(frozen=True)
class ToolsetChoice:
    install: VsInstall
    toolset: str  # 14.29 (what -vcvars_ver gets)
    full: str  # 14.29.30133 (the folder); same as toolset for VS 2015
    vcvarsall: str
    args: tuple[str, ...]
    note: str = ""  # why it differs from the Plan's toolset, when it does


# --- vswhere ----------------------------------------------------------------------------------------------


def parse_vswhere(text: str, legacy: bool = False) -> list[VsInstall]:
    """Installs from ``vswhere -format json`` output (a JSON list); legacy=True for the ``-legacy`` query."""
    text = text.strip()
    if not text:
        return []
    try:
        rows = nesting.loads(text)
    except ValueError as exc:
        raise ToolchainError(f"vswhere printed something that is not JSON ({exc}): {text[:200]!r}") from None
    installs = []
    for row in rows:
        version = str(row.get("installationVersion", ""))
        path = str(row.get("installationPath", ""))
        if not version or not path:
            continue
        catalog = row.get("catalog") or {}
        installs.append(
            VsInstall(
                path=path,
                version=version,
                display_version=str(catalog.get("productDisplayVersion", "")),
                name=str(row.get("displayName") or f"Visual Studio {version}"),
                legacy=legacy or version_key(version.split(".")[0])[0] < 15,
            )
        )
    return installs


def merge_installs(modern: Sequence[VsInstall], legacy: Sequence[VsInstall]) -> list[VsInstall]:
    """vswhere -legacy also lists the modern installs (with less information): keep the modern rows."""
    seen = {i.path.lower() for i in modern}
    merged = list(modern) + [i for i in legacy if i.path.lower() not in seen]
    return sorted(merged, key=lambda i: version_key(".".join(i.version.split(".")[:2])), reverse=True)


def vswhere_path(environ: Mapping[str, str]) -> str:
    return environ.get("VSWHERE") or VSWHERE_DEFAULT


def find_installs(environ: Mapping[str, str]) -> list[VsInstall]:
    """Run vswhere twice: ``-products *`` (Build Tools included) and ``-legacy`` (VS 2015), which cannot be combined."""
    exe = vswhere_path(environ)
    if not Path(exe).is_file():
        raise ToolchainError(
            f"vswhere.exe not found at {exe}: no Visual Studio 2017+ installer here. Fix: {VSWHERE_FIX}."
        )

    def query(*args: str) -> str:
        proc = signals.run(
            [exe, *args, "-format", "json", "-utf8"],
            capture_output=True, text=True, encoding="utf-8", errors="replace", check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ToolchainError(f"{exe} {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return str(proc.stdout)

    modern = parse_vswhere(query("-products", "*", "-all", "-prerelease"))
    legacy = parse_vswhere(query("-legacy"), legacy=True)
    return merge_installs(modern, legacy)


# --- toolsets ---------------------------------------------------------------------------------------------


def parse_toolset_dirs(names: Iterable[str]) -> list[str]:
    """The folder names of ``VC\\Tools\\MSVC`` that are toolsets (14.29.30133), oldest first."""
    found = [n for n in names if _TOOLSET_DIR.match(n)]
    return sorted(found, key=version_key)


def short_toolset(full: str) -> str:
    major, minor = full.split(".")[:2]
    return f"{major}.{minor}"


def toolsets_of(install: VsInstall) -> list[str]:
    """Full toolset versions of one install. VS 2015 (legacy) has the single toolset 14.0, no folder per version."""
    if install.legacy:
        return ["14.0"] if (Path(install.path) / "VC" / "vcvarsall.bat").is_file() else []
    folder = Path(install.path) / "VC" / "Tools" / "MSVC"
    return parse_toolset_dirs(p.name for p in folder.iterdir()) if folder.is_dir() else []


def vcvarsall_of(install: VsInstall) -> str:
    base = PureWindowsPath(install.path) / "VC"
    return str(base / "vcvarsall.bat") if install.legacy else str(base / "Auxiliary" / "Build" / "vcvarsall.bat")


def choose_toolset(installed: Sequence[tuple[VsInstall, Sequence[str]]], toolchain: Toolchain) -> ToolsetChoice:
    """The Plan's toolset where installed; else the newest installed toolset the Plan's nvcc accepts (the Plan
    resolved ``auto`` to the newest toolset the tables know, which a runner need not have).

    VS 2015's 14.0 is reached from a VS 2017+ install with ``-vcvars_ver=14.0`` when there is one, else with VS
    2015's own vcvarsall.bat (``amd64``)."""
    wanted = toolchain.msvc_toolset
    if wanted is None:
        raise ToolchainError("the Plan names no MSVC toolset (not a win-64 Plan?)")
    accepted = _accepted(toolchain)
    if not installed:
        raise ToolchainError(
            f"no Visual Studio installation found (vswhere lists none). This cell needs MSVC toolset {wanted} "
            f"(nvcc accepts {accepted}). Fix: {VSWHERE_FIX}."
        )
    available: list[tuple[str, str, VsInstall]] = []  # (short, full, install), newest install first
    for install, fulls in installed:
        available.extend((short_toolset(f) if f != "14.0" else "14.0", f, install) for f in fulls)
    exact = [a for a in available if a[0] == wanted]
    note = ""
    if exact:
        short, full, install = _prefer_modern(exact)
    else:
        usable = [a for a in available if a[0] in accepted]
        if not usable:
            have = ", ".join(f"{a[1]} ({a[2].name})" for a in available) or "none"
            raise ToolchainError(
                f"no installed MSVC toolset fits this cell: it needs {wanted} (nvcc from CUDA {toolchain.nvcc} "
                f"accepts {accepted}); installed toolsets: {have}. Fix: {toolset_fix(toolchain)}."
                if toolchain.nvcc
                else f"no installed MSVC toolset fits this cell: it needs {wanted} (accepted {accepted}); installed "
                f"toolsets: {have}. Fix: {toolset_fix(toolchain)}."
            )
        newest = max(version_key(a[1]) for a in usable)
        short, full, install = _prefer_modern([a for a in usable if version_key(a[1]) == newest])
        note = f"the Plan's MSVC {wanted} is not installed; using {full}, which is in the accepted range {accepted}"
    if install.legacy:
        modern = [i for i, _ in installed if not i.legacy]
        if modern:
            return ToolsetChoice(modern[0], short, full, vcvarsall_of(modern[0]), ("x64", "-vcvars_ver=14.0"), note)
        return ToolsetChoice(install, short, full, vcvarsall_of(install), ("amd64",), note)
    return ToolsetChoice(install, short, full, vcvarsall_of(install), ("x64", f"-vcvars_ver={short}"), note)


def _accepted(toolchain: Toolchain) -> Range:
    low, _, high = (toolchain.msvc_accepted or toolchain.msvc_toolset or "").partition("-")
    return Range(min=low, max=high or low)


def _prefer_modern(rows: Sequence[tuple[str, str, VsInstall]]) -> tuple[str, str, VsInstall]:
    return sorted(rows, key=lambda r: (r[2].legacy, -version_key(r[2].version.split(".")[0])[0]))[0]


def toolset_fix(toolchain: Toolchain) -> str:
    """How to install the Plan's toolset."""
    toolset, year = toolchain.msvc_toolset or "", toolchain.visual_studio
    if year is None:
        return f"install MSVC toolset {toolset}"
    if year == 2015:
        return "install Visual Studio 2015 (or the VS 2017 component 'VC++ 2015.3 v14.00 (v140) toolset for desktop')"
    return (
        f"in the Visual Studio Installer, add the individual component 'MSVC v14{toolset.split('.')[1][0]} - "
        f"VS {year} C++ x64/x86 build tools (v{toolset})' (Visual Studio {year} ships toolsets "
        f"{toolchain.visual_studio_toolsets}), "
        "or pin another toolset with --msvc"
    )


# --- known-bad updates ------------------------------------------------------------------------------------


def known_bad(install: VsInstall, table: Sequence[KnownBadVisualStudio]) -> list[KnownBadVisualStudio]:
    """Entries of the known_bad table whose Visual Studio range contains this install's update (e.g. 17.4.1)."""
    if install.legacy:
        return []
    update = install.update
    parts = update.split(".")
    while len(parts) < 3:
        parts.append("0")
    key = ".".join(parts[:3])
    return [bad for bad in table if key in bad.versions]


# --- vcvarsall.bat ----------------------------------------------------------------------------------------


def vcvars_command(choice: ToolsetChoice) -> str:
    """The line for ``cmd /d /s /c``: vcvarsall.bat, then a marker, then ``set`` (only reached if it succeeded)."""
    return f'"call "{choice.vcvarsall}" {" ".join(choice.args)} && echo {ENV_MARKER} && set"'


def parse_set_output(text: str) -> dict[str, str]:
    """Variables from ``set``: the lines after the marker when there is one (vcvarsall's banner comes before)."""
    if ENV_MARKER in text:
        text = text.split(ENV_MARKER, 1)[1]
    env: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name and not name.startswith(" "):
            env[name] = value.rstrip("\r")
    return env


def env_delta(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, str]:
    """What vcvarsall added or changed, with upper-case names: Windows variable names are case-insensitive (``set``
    prints Path, os.environ says PATH), and a child given both would get either."""
    old = {k.upper(): v for k, v in before.items()}
    return {k.upper(): v for k, v in after.items() if old.get(k.upper()) != v}


def vcvars_errors(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("[ERROR:")]


def check_vcvars(output: str, delta: Mapping[str, str], choice: ToolsetChoice) -> None:
    """vcvarsall.bat reports some failures only as ``[ERROR:...]`` lines: make them fatal, and make sure the
    toolset it activated is the one chosen (VCToolsVersion)."""
    command = f"{choice.vcvarsall} {' '.join(choice.args)}"
    errors = vcvars_errors(output)
    if ENV_MARKER not in output or errors:
        shown = "; ".join(errors) or (output.strip().splitlines() or ["(no output)"])[-1]
        raise ToolchainError(
            f"{command} failed: {shown}. Fix: install MSVC toolset {choice.toolset} in that Visual Studio "
            f"({choice.install.name}), or pin an installed one with --msvc."
        )
    upper = {k.upper(): v for k, v in delta.items()}
    active = upper.get("VCTOOLSVERSION", "").strip()
    if choice.full != "14.0" and active and not active.startswith(choice.toolset + "."):
        raise ToolchainError(f"{command} activated MSVC {active}, not {choice.toolset}")
    if "PATH" not in upper:
        raise ToolchainError(f"{command} did not change PATH: the environment it printed is not a developer one")


def capture_vcvars(choice: ToolsetChoice, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Run vcvarsall.bat in a child cmd.exe and return the variables it set (for the build process only)."""
    before = dict(os.environ if environ is None else environ)
    proc = signals.run(
        f"cmd.exe /d /s /c {vcvars_command(choice)}",
        capture_output=True,
        text=True,
        errors="replace",
        env=before,
        check=False,
    )
    output = proc.stdout + proc.stderr
    delta = env_delta(before, parse_set_output(output))
    check_vcvars(output, delta, choice)
    return delta
