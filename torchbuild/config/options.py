"""Options of one run that are not part of the Plan: they say where things come from and go, not what is built."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import platformdirs

DEFAULT_GIT_URL = "https://github.com/pytorch/pytorch"
# the user's cache folder: ~/.cache/torchbuild (XDG_CACHE_HOME), %LOCALAPPDATA%\torchbuild\Cache on Windows
DEFAULT_CACHE_DIR = Path(platformdirs.user_cache_dir("torchbuild", appauthor=False))


@dataclass(frozen=True)
class RunOptions:
    wheel: Path | None = None  # --wheel: prebuilt source
    force: bool = False
    replace: bool = False  # --replace: publish over a different file under a published name
    cache_dir: Path = DEFAULT_CACHE_DIR
    conda_format: Literal["conda", "tar.bz2"] = "conda"
    compression_level: int = 5
    compression_threads: int = 2
    repodata: Path | None = None  # --repodata / TORCHBUILD_REPODATA: stored repodata to solve against; None: live
    source_dir: Path | None = None  # --source-dir: compile this checkout
    git_ref: str | None = None  # --git-ref: clone this tag, branch or full commit SHA (with submodules) and compile it
    git_url: str = DEFAULT_GIT_URL  # --git-url
    # "pytorch": the source must be a PyTorch checkout of the Plan's release (checked) and the wheel must match
    # the Plan; "project": any setuptools project built the same way (the tests' fixture packages).
    source_kind: Literal["pytorch", "project"] = "pytorch"
    # --build-version: the version the artifacts carry (PYTORCH_BUILD_VERSION of a compile), instead of the one the
    # source says (a wheel's, a checkout's version.txt + git<sha7>); its facts are those of the release it belongs to
    build_version: str | None = None
    verbose: bool = False  # -v: also what the probes that are expected to fail said

    @property
    def compiles(self) -> bool:
        """A checkout is compiled (--source-dir or --git-ref), rather than a prebuilt wheel taken."""
        return self.source_dir is not None or self.git_ref is not None
