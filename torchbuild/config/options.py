"""The options, typed: the one place each option's choices (a Literal) and default are written. RunOptions: those
of one run that are not part of the Plan (where things come from and go, not what is built); BuildOptions:
matrix.yaml's ``build`` mapping. matrix.yaml's validation and the CLI's defaults, choices and help read them
(config/option_fields.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from torchbuild.knowledge.cache_folder import user_cache_dir

DEFAULT_GIT_URL = "https://github.com/pytorch/pytorch"

CondaFormat = Literal["conda", "tar.bz2"]


@dataclass(frozen=True)
class RunOptions:
    wheel: Path | None = None  # --wheel: prebuilt source
    force: bool = False
    replace: bool = False  # --replace: publish over a different file under a published name
    cache_dir: Path = field(default_factory=user_cache_dir)  # --cache-dir
    conda_format: CondaFormat = "conda"
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


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """matrix.yaml's ``build: {...}``: how a cell is compiled."""

    max_jobs: str = "auto"  # "auto" = this host's CPU count, else a positive integer
    compiler_cache: Literal["sccache", "clcache", "none"] = "sccache"
    generator: Literal["ninja", "visual-studio"] = "ninja"  # visual-studio: win-64 only
    msvc_toolset: str = "auto"  # auto = newest toolset nvcc accepts, else e.g. "14.29"
    timeout_hours: float = 6.0
    # rattler-build (py-rattler-build, every cell) | conda-build (win-64, nightly)
    conda_builder: Literal["rattler-build", "conda-build"] = "rattler-build"
