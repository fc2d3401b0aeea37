"""conda-build's selector names (``# [win and py>=38]``) and their values for one cell: what the recipe's selectors
are evaluated against."""

from __future__ import annotations

CPU = "cpu"


def conda_selectors(platform: str, python: str, cuda: str, cudnn: int | None) -> dict[str, bool | int | str]:
    """The names conda-build defines for recipe selectors (``# [win and py>=38]``), for one cell."""
    win = platform.startswith("win-")
    major, minor = (int(p) for p in python.split("."))
    return {
        "win": win,
        "win32": platform == "win-32",
        "win64": platform == "win-64",
        "linux": platform.startswith("linux-"),
        "linux32": platform == "linux-32",
        "linux64": platform == "linux-64",
        "unix": not win,
        "osx": False,
        "x86_64": platform.endswith("-64"),
        "py": int(f"{major}{minor}"),  # conda-build's spelling: 36 for 3.6, 311 for 3.11
        "py3k": major == 3,
        "py2k": major == 2,
        "target_platform": platform,
        "cuda_compiler_version": cuda if cuda != CPU else "None",
        "cudnn": str(cudnn) if cudnn is not None else "None",
    }
