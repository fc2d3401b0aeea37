"""The pin step: before the runner starts, every selected cell's Plan is made final.

``torch: latest`` resolves to the newest release the compatibility data knows for the cell. Compiling, that is the
release. Taking a prebuilt wheel, it is the newest release whose wheel for the cell the configured package indexes
offer (pip.conf, PIP_* variables, find-links, constraints), by one rule on every platform: a wheel of the cell's
build is ``<release>+<label>`` (``2.13.0+cpu``), or the plain ``<release>`` where the data says PyPI publishes that
build unlabelled (win-64 CPU). ``--wheel`` pins the release of the given wheel. Each cell says in one line which
release it took and why; a cell for which no release is offered is a clear error naming what was looked for.
"""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torchbuild.config.compat import Compat, TorchRelease, load
from torchbuild.config.matrix import LATEST, Cell, Matrix
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, one_of
from torchbuild.host import pip
from torchbuild.host.console import console
from torchbuild.plan import Plan, check_cell, probe, resolve, work_dir_of
from torchbuild.run import index_memo, state

MEMO = "index-answers.json"  # in the cache directory (index_memo.py)
T = TypeVar("T")


def _ask(target: tuple[str, ...]) -> tuple[list[Version], list[str]]:
    """What the configured indexes offer of torch for a target, within the configured constraints, and the local
    paths that answer depends on (for index_memo)."""
    # Three pip processes, each mostly pip's own start-up: side by side they take about the time of one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        asked_settings = pool.submit(pip.settings)
        asked_files = pool.submit(pip.config_files)
        asked_versions = pool.submit(pip.index_versions, "torch", target)
        configured, files, versions = asked_settings.result(), asked_files.result(), asked_versions.result()
    constraints = pip.constraints_for("torch", configured)
    offered = [v for v in versions if all(c.specifier.contains(v, prereleases=True) for c in constraints)]
    locations = [u for name in index_memo.LOCATION_SETTINGS for u in configured.get(name, [])]
    paths = [*files, *map(str, pip.constraint_files(configured)), *index_memo.local_directories(locations, "torch")]
    return offered, paths


@functools.cache
def _offered(target: tuple[str, ...], record: Path | None, fresh: bool = False) -> frozenset[Version]:
    return frozenset(index_memo.offered(record, target, lambda: _ask(target), fresh))


class IndexQuery(Protocol):
    """What ``newest_available`` needs of a cell: a Plan, or the Probe the pin step makes before resolving."""

    @property
    def platform(self) -> str: ...

    @property
    def cuda(self) -> str: ...

    @property
    def local_version(self) -> str: ...

    @property
    def pip_target(self) -> list[str]: ...


def _unlabelled(compat: Compat, query: IndexQuery, release: str) -> bool:
    rules = compat.packaging.unlabelled_wheels
    return any(r.applies(query.platform, release, query.cuda) and r.value == query.local_version for r in rules)


def newest_available(
    query: IndexQuery,
    releases: Sequence[str],
    compat: Compat | None = None,
    record: Path | None = None,
    fresh: bool = False,
) -> str | None:
    """Of ``releases`` (newest first), the newest whose prebuilt wheel of the cell's build the configured indexes
    offer for the cell's Python and platform; None if none. ``record``: where index_memo keeps the indexes'
    answer (None: always ask, keep nothing); ``fresh``: ask even where the record holds."""
    compat = compat or load()
    offered = _offered(tuple(query.pip_target), record, fresh)
    for release in releases:
        if Version(f"{release}+{query.local_version}") in offered:
            return release
        if _unlabelled(compat, query, release) and Version(release) in offered:
            return release
    return None


def _wheel_release(wheel: Path) -> str | None:
    """The release of a torch wheel file name (2.13.0 for torch-2.13.0+cpu-...); None if it is not one."""
    try:
        _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        return None  # the source stage names the problem
    return version.public


def _say(cell_id: str, line: str) -> None:
    console.print(f"[bold]{cell_id}[/]: {line}", highlight=False)


def choose(
    cell: Cell, releases: Sequence[TorchRelease], options: RunOptions, compat: Compat | None = None
) -> str | None:
    """The release of ``cell`` for a run with ``options``, of the ``releases`` that can be its release (newest
    first; ``plan.check_cell``); None where the cell names its release itself."""
    compat = compat or load()
    if cell.torch != LATEST:
        return None
    newest = releases[0].version
    latest = f"latest is {newest}"
    if options.compiles:
        _say(cell.id, f"{latest}; compiling it from the checkout")
        return newest
    if options.wheel is not None:
        given = _wheel_release(options.wheel)
        if given is None or given == newest:
            return newest
        _say(cell.id, f"{latest}; --wheel {options.wheel.name} is {given}: using it")
        return given
    query = probe(cell, releases[0], compat)
    candidates = [r.version for r in releases]
    found = newest_available(query, candidates, compat, options.cache_dir / MEMO, fresh=options.force)
    if found is None:
        tags = query.wheel_tags
        label = f"+{query.local_version}" + (" (or unlabelled)" if query.unlabelled else "")
        raise UserError(
            f"{cell.id}: the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, "
            f"constraints) offer no prebuilt torch wheel {label} for {tags.interpreter}-{tags.abi}-{tags.platform} "
            f"of any release that supports this cell ({one_of(candidates[:3])}, ...). Point pip at an index that "
            "has one, give one with --wheel PATH, or compile with --source-dir/--git-ref."
        )
    if found == newest:
        _say(cell.id, f"{latest}; the configured indexes offer it for this cell")
    else:
        _say(cell.id, f"{latest}; the configured indexes offer {found} for this cell: using it")
    return found


def _each(cells: Sequence[Cell], work: Callable[[Cell], T]) -> list[T]:
    """``work`` for every cell; a cell's UserError names the cell when there are several."""
    done = []
    for cell in cells:
        try:
            done.append(work(cell))
        except UserError as exc:
            if len(cells) == 1:
                raise
            raise type(exc)(f"cell {cell.id}: {exc}") from None
    return done


def check_all(cells: Sequence[Cell], matrix: Matrix) -> list[list[TorchRelease]]:
    """Every cell checked (``plan.check_cell``) before any index is asked; each cell's candidate releases."""
    compat = load()
    return _each(cells, lambda cell: check_cell(cell, matrix, compat))


def pin_all(
    cells: Sequence[Cell], matrix: Matrix, options: RunOptions, candidates: Sequence[Sequence[TorchRelease]]
) -> list[Plan]:
    """The final Plan of every cell: its release chosen first, then resolved once."""
    compat = load()
    releases = dict(zip((c.id for c in cells), candidates, strict=True))
    return _each(cells, lambda cell: resolve(cell, matrix, compat, choose(cell, releases[cell.id], options, compat)))


def pin_to_record(cell: Cell, matrix: Matrix, root: Path) -> Plan:
    """The Plan of a cell as the build job that recorded ``build/<cell-id>/state.json`` resolved it (the smoke
    command runs on another machine, whose indexes may offer other releases)."""
    recorded = state.recorded_release(state.path_of(root, work_dir_of(cell)))
    return resolve(cell, matrix, pinned=recorded if cell.torch == LATEST else None)
