"""The pin step for the companions a cell builds (win-64 torchvision and torchaudio, from PyPI's wheels): before
the Plan is resolved, each takes the newest of its candidate releases (pairing.candidates: the one companions.yaml
pairs with the cell's torch, then the older releases of its series whose wheel also ships with it) that the
configured package indexes offer for the cell's platform and Python, as pip sees them (pip.conf, PIP_* variables,
constraints such as torchvision<=0.29.1), asked as torch's release is (index_probe.py, kept by index_memo.py).

Where the indexes offer the paired release, nothing changes. Where they offer only an older one of its series, the
plan line says so ("0.29.2 pairs; the indexes offer up to 0.29.1: taken"). Where they offer none, the companion is
not shipped, with that reason (named in ``packages``, it is refused before anything runs). A companion named with its
release (``torchvision==0.28.0``) is taken as named.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from pathlib import Path

from packaging.version import Version

from torchbuild.config.matrix import Cell, Matrix
from torchbuild.config.options import RunOptions
from torchbuild.errors import one_of
from torchbuild.host import uv
from torchbuild.knowledge import pairing
from torchbuild.knowledge.companions import companion_names, load, parse_package
from torchbuild.knowledge.compat import Compat, TorchRelease
from torchbuild.pin import index_memo, index_probe
from torchbuild.plan import probe
from torchbuild.run import state

MEMO = "index-answers.json"  # in the cache directory, beside torch's answers (index_memo.py)
WHERE_ASKED = "the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, constraints)"


def _ask(
    name: str, specs: Sequence[str], target: uv.Target, log: Path, verbose: bool
) -> tuple[list[Version], list[str]]:
    """The newest of ``specs`` (``torchvision==0.29.2``, newest first) the indexes offer (one version, or none), and
    the local paths the answer depends on."""
    log.parent.mkdir(parents=True, exist_ok=True)
    paths = index_probe.answer_depends_on(name)
    for spec in specs:
        found = index_probe.offered_version(spec, target, log, verbose, deps=False, project=name)
        if found is not None:
            return [found], paths
    return [], paths


@functools.cache
def _offered(
    name: str, specs: tuple[str, ...], pip_target: tuple[str, ...], record: Path | None, fresh: bool, verbose: bool
) -> frozenset[Version]:
    log = (record.parent if record is not None else Path(tempfile.gettempdir())) / "pin-probes.log"
    target = uv.target_of(list(pip_target))
    key = (*pip_target, *specs)
    return frozenset(index_memo.offered(record, key, lambda: _ask(name, specs, target, log, verbose), fresh))


def _wanted(matrix: Matrix) -> list[str]:
    """The companions the cell asks for without naming their release (those named with one are taken as named,
    those compiled from a checkout need no index)."""
    compiled = {name for name, _source in matrix.package_sources}
    if matrix.packages is None:
        return [name for name in companion_names() if name not in compiled]
    named = dict(parse_package(text) for text in matrix.packages)
    return [name for name in companion_names() if name in named and named[name] is None and name not in compiled]


def offered(
    cell: Cell, torch: TorchRelease, matrix: Matrix, options: RunOptions, compat: Compat
) -> dict[str, pairing.Offered]:
    """Per companion the cell builds, what the indexes offer where it is not the release that pairs (for
    plan.resolve); nothing for a cell whose platform builds no companion."""
    if not load().built_on(cell.platform):
        return {}
    query = probe(cell, torch, compat)
    target = pairing.Target(
        platform=cell.platform, python=cell.python, torch_release=torch.version,
        torch_version=f"{torch.version}+{query.local_version}", local_version=query.local_version,
    )  # fmt: skip
    found: dict[str, pairing.Offered] = {}
    for name in _wanted(matrix):
        releases = pairing.candidates(name, target)
        if not releases:
            continue  # none pairs, or the paired one cannot ship: pairing.choose says why
        specs = tuple(f"{name}=={release}" for release in releases)
        record = options.cache_dir / MEMO
        versions = _offered(name, specs, tuple(query.pip_target), record, options.force, options.verbose)
        taken = next((r for r in releases if Version(r) in {Version(v.public) for v in versions}), None)
        if taken == releases[0]:
            continue
        if taken is None:
            tags = query.wheel_tags
            note = (
                f"{WHERE_ASKED} offer no {name} wheel of {one_of(list(releases))} for {tags.interpreter}-{tags.abi}-"
                f"{tags.platform} (the releases that ship with torch {torch.version}); point pip at an index that has "
                "one, or leave it out of packages"
            )
            found[name] = pairing.Offered(release=None, note=note)
        else:
            found[name] = pairing.Offered(
                release=taken, note=f"{releases[0]} pairs; the indexes offer up to {taken}: taken"
            )
    return found


def recorded(path: Path) -> dict[str, pairing.Offered]:
    """What the pin step of the build job that recorded ``path`` (its state.json) took of the companions, so that
    the smoke job resolves the same Plan whatever its own indexes offer."""
    found: dict[str, pairing.Offered] = {}
    for entry in state.recorded_companions(path):
        name, note, release = entry.get("name"), entry.get("offered"), entry.get("release")
        if isinstance(name, str) and isinstance(note, str) and note:
            found[name] = pairing.Offered(release=release if isinstance(release, str) else None, note=note)
    return found
