"""The pin step's one question to the package indexes: which version of a project's wheel they offer for a
requirement on a target (uv's resolver, with pip's configuration and constraints: host/uv.py), and the local paths
that answer depends on (index_memo.py keeps it while they are unchanged)."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from torchbuild.errors import UserError
from torchbuild.host import pip_config, uv
from torchbuild.host.console import console
from torchbuild.pin import index_memo


def offered_version(
    spec: str, target: uv.Target, log: Path, verbose: bool = False, deps: bool = False, project: str = "torch"
) -> Version | None:
    """The version of the wheel of ``project`` the configured indexes offer for ``spec`` (``torch==2.13.0+cpu``,
    ``torch===2.14.1``, ``torchvision==0.29.2``) on the target (``deps``: with every requirement it declares there,
    such as a CUDA build's nvidia-* pins); None where they offer none (the expected answer of most probes: uv's
    words go to ``log``, and with ``verbose`` to the terminal)."""
    try:
        chosen = uv.lock([spec], target, log=log, deps=deps)
    except uv.UvError as exc:
        if exc.no_match:
            if verbose:
                console.print(f"pin: {spec} ({target.platform}, Python {target.python}): {exc.detail}", highlight=False)
            return None
        raise UserError(f"asking the configured package indexes for {spec}: {exc.detail} (log: {log})") from None
    return Version(next(c.version for c in chosen if c.name == project))


def answer_depends_on(project: str) -> list[str]:
    """The local paths an index's answer about ``project`` depends on (index_memo): pip's configuration files, its
    constraints files, and its local index and find-links folders."""
    configured = pip_config.settings()
    locations = [u for name in index_memo.LOCATION_SETTINGS for u in configured.get(name, [])]
    return [
        *pip_config.config_files(),
        *map(str, pip_config.constraint_files(configured)),
        *index_memo.local_directories(locations, project),
    ]
