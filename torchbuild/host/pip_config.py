"""pip's configuration as pip applies it, read from its files and PIP_* variables by pip's documented rules
(https://pip.pypa.io/en/stable/topics/configuration/), without running pip or reading its text output.

Files, lowest precedence first: the global ones (each of ``$XDG_CONFIG_DIRS/pip/pip.conf`` and ``/etc/pip.conf``;
``C:\\ProgramData\\pip\\pip.ini`` on Windows), the user's (``~/.pip/pip.conf``, then ``~/.config/pip/pip.conf``;
``%APPDATA%\\pip\\pip.ini``), the interpreter's (``<sys.prefix>/pip.conf``) and ``PIP_CONFIG_FILE``, which also
drops the user's files when it exists and every file when it is ``os.devnull``. In each file the ``[global]``
section, then the sections of the commands torchbuild runs (``[install]``, ``[download]``); a later value of a
setting replaces an earlier one, and a non-empty ``PIP_<SETTING>`` variable replaces them all.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import platformdirs
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

WINDOWS = sys.platform == "win32"
BASENAME = "pip.ini" if WINDOWS else "pip.conf"
SECTIONS = ("global", "install", "download")  # the commands torchbuild runs pip (and uv for pip) with


def _global_files() -> list[str]:
    if sys.platform == "darwin":
        folders = [platformdirs.site_data_dir("pip", appauthor=False, multipath=True)]
    elif WINDOWS:
        folders = [platformdirs.site_config_dir("pip", appauthor=False, multipath=True)]
    else:
        folders = [*platformdirs.site_config_dir("pip", appauthor=False, multipath=True).split(os.pathsep), "/etc"]
    return [os.path.join(folder, BASENAME) for folder in folders]


def _user_files() -> list[str]:
    legacy = os.path.join(os.path.expanduser("~"), "pip" if WINDOWS else ".pip", BASENAME)
    folder = platformdirs.user_config_dir("pip", appauthor=False, roaming=True)
    if sys.platform == "darwin" and not os.path.isdir(folder):
        folder = os.path.expanduser("~/.config/pip")
    return [legacy, os.path.join(folder, BASENAME)]


def config_files(environ: Mapping[str, str] | None = None) -> list[str]:
    """Every configuration file pip looks for, whether it is there or not, lowest precedence first."""
    env = os.environ if environ is None else environ
    named = env.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    files = _global_files()
    if not (named and os.path.exists(named)):
        files += _user_files()
    files.append(os.path.join(sys.prefix, BASENAME))
    if named:
        files.append(named)
    return files


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").removeprefix("--")


def settings(environ: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """The settings in force (name -> values; a multi-valued setting such as find-links split on whitespace)."""
    env = os.environ if environ is None else environ
    found: dict[str, list[str]] = {}
    for path in config_files(env):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            continue  # pip itself names a broken file when it runs
        for section in SECTIONS:
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if value.strip():
                        found[_normal(key)] = value.split()
    for key, value in env.items():
        name = _normal(key.removeprefix("PIP_"))
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE" and value.strip():
            found[name] = value.split()
    return found


def is_true(settings_: Mapping[str, Sequence[str]], name: str) -> bool:
    """A boolean setting as pip reads it (``no-index = yes``, ``PIP_NO_INDEX=1``)."""
    values = settings_.get(name) or ["false"]
    return values[-1].lower() in ("1", "true", "yes", "on")


def constraint_files(configured: Mapping[str, list[str]] | None = None) -> list[Path]:
    """The constraints files pip applies to every install and download (PIP_CONSTRAINT, ``constraint``)."""
    return [Path(p) for p in (configured if configured is not None else settings()).get("constraint", [])]


def constraints_for(name: str, configured: Mapping[str, list[str]] | None = None) -> list[Requirement]:
    """The configured constraints on ``name`` (e.g. this machine's ``torch<=2.14.1``)."""
    found: list[Requirement] = []
    for path in constraint_files(configured):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue  # pip itself reports an unreadable constraints file when it runs
        for line in lines:
            text = line.split(" #", 1)[0].strip()
            if not text or text.startswith(("#", "-")):
                continue
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) == canonicalize_name(name):
                found.append(requirement)
    return found
