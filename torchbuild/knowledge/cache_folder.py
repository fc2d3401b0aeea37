"""Where torchbuild keeps what it downloads and what it parsed, by each OS's convention (platformdirs): the default
of --cache-dir, and where the parsed data tables are kept (knowledge/datafiles.py)."""

from __future__ import annotations

from pathlib import Path

import platformdirs


def user_cache_dir() -> Path:
    """The user's cache folder, asked when needed (so XDG_CACHE_HOME set after import counts): ~/.cache/torchbuild
    (XDG_CACHE_HOME), %LOCALAPPDATA%\\torchbuild\\Cache on Windows."""
    return Path(platformdirs.user_cache_dir("torchbuild", appauthor=False))
