"""The pin step: before the runner starts, every selected cell's Plan is made final.

``torch: latest`` resolves to the newest release the compatibility data knows for the cell. Compiling, that is the
release. Taking a prebuilt wheel, it is the newest release whose wheel for the cell the configured package indexes
offer (pip.conf, PIP_* variables, find-links, constraints), by one rule on every platform: a wheel of the cell's
build is ``<release>+<label>`` (``2.13.0+cpu``), or the plain ``<release>`` where the data says PyPI publishes that
build unlabelled (win-64 CPU). uv's resolver answers for the cell's platform and Python, one release at a time
(host/uv.py, with pip's configuration); the probes meant to fail say nothing (``-v``: what the resolver said).
``--wheel`` pins the release of the given wheel. The users' own builds (a release candidate, a nightly, a source
build's ``X.Y.Za0+git<sha7>``, a fork's label; a checkout's version.txt past every release) keep their version and
take the facts of the release they belong to (own_build.py). Each cell says in one line which release it took and
why; a cell for which no release is offered is a clear error naming what was looked for. The companions a cell
builds are pinned the same way, to the torch release chosen (pin_companions.py).
"""

from __future__ import annotations

import concurrent.futures
import functools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torchbuild.config.matrix import LATEST, Cell, Matrix
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, one_of
from torchbuild.host import uv
from torchbuild.host.console import console
from torchbuild.knowledge import cuda_wheels
from torchbuild.knowledge.compat import CPU, Compat, TorchRelease, load
from torchbuild.pin import companion_checkouts, index_memo, index_probe, own_build, pin_companions
from torchbuild.pin.own_build import Pin
from torchbuild.plan import Plan, check_cell, probe, resolve, unlabelled_build, work_dir_of
from torchbuild.run import state

MEMO = "index-answers.json"  # in the cache directory (index_memo.py)
T = TypeVar("T")


PROBES_AT_ONCE = 4  # uv processes asking about successive releases side by side


def _first(names: Sequence[str], target: uv.Target, log: Path, verbose: bool, deps: bool) -> Version | None:
    for spec in names:
        if (found := index_probe.offered_version(spec, target, log, verbose, deps)) is not None:
            return found
    return None


def _ask(
    target: uv.Target, specs: Sequence[tuple[str, ...]], log: Path, verbose: bool, deps: bool
) -> tuple[list[Version], list[str]]:
    """Of each release's wheel names (``specs``, newest release first), the first the configured indexes offer
    (within the configured constraints), and the local paths that answer depends on (for index_memo). The newest
    torch offered at all is asked first: releases above it (or all, where none is) need no question. ``log`` keeps
    what the resolver said to the last question only."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("", encoding="utf-8")
    paths = index_probe.answer_depends_on("torch")
    newest = index_probe.offered_version("torch", target, log, verbose)
    asked = [names for names in specs if newest is not None and _public(names[0]) <= Version(newest.public)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=PROBES_AT_ONCE) as pool:
        pending = [pool.submit(_first, names, target, log, verbose, deps) for names in asked]
        for done in pending:
            found = done.result()
            if found is not None:
                for other in pending:
                    other.cancel()
                return [found], paths
    return [], paths


def _public(spec: str) -> Version:
    """2.13.0 of ``torch==2.13.0+cpu``."""
    return Version(Version(spec.rpartition("=")[2]).public)


@functools.cache
def _offered(
    target: uv.Target,
    specs: tuple[tuple[str, ...], ...],
    key: tuple[str, ...],
    record: Path | None,
    fresh: bool,
    verbose: bool,
    deps: bool,
) -> frozenset[Version]:
    log = (record.parent if record is not None else Path(tempfile.gettempdir())) / "pin-probes.log"
    return frozenset(index_memo.offered(record, key, lambda: _ask(target, specs, log, verbose, deps), fresh))


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
    return unlabelled_build(compat, query.platform, release, query.cuda, query.local_version)


def newest_available(
    query: IndexQuery,
    releases: Sequence[str],
    compat: Compat | None = None,
    record: Path | None = None,
    fresh: bool = False,
    verbose: bool = False,
) -> str | None:
    """Of ``releases`` (newest first), the newest whose prebuilt wheel of the cell's build the configured indexes
    offer for the cell's Python and platform; None if none. ``record``: where index_memo keeps the indexes'
    answer (None: always ask, keep nothing); ``fresh``: ask even where the record holds; ``verbose``: say what
    each probe that found nothing was told."""
    compat = compat or load()
    specs = tuple(_names(compat, query, release) for release in releases)
    # A CUDA build is offered only with its CUDA libraries: its nvidia-* requirements must resolve too.
    deps = query.cuda != CPU
    key = (*query.pip_target, *(name for names in specs for name in names), *(["with-dependencies"] if deps else []))
    offered = _offered(uv.target_of(query.pip_target), specs, key, record, fresh, verbose, deps)
    for release, names in zip(releases, specs, strict=True):
        if any(Version(name.rpartition("=")[2]) in offered for name in names):
            return release
    return None


def _names(compat: Compat, query: IndexQuery, release: str) -> tuple[str, ...]:
    """The requirements naming the wheel of the cell's build of ``release``: ``torch==<release>+<label>``, and
    where the data says PyPI publishes the build unlabelled, exactly the plain release (``===``: no local label)."""
    labelled = f"torch=={release}+{query.local_version}"
    return (labelled, f"torch==={release}") if _unlabelled(compat, query, release) else (labelled,)


def _wheel_release(wheel: Path) -> str | None:
    """The release of a torch wheel file name (2.13.0 for torch-2.13.0+cpu-...); None if it is not one."""
    try:
        _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        return None  # the source stage names the problem
    return version.public


def _say(cell_id: str, line: str) -> None:
    console.print(f"[bold]{cell_id}[/]: {line}", highlight=False)


def choose(cell: Cell, releases: Sequence[TorchRelease], options: RunOptions, compat: Compat | None = None) -> Pin:
    """The release of ``cell`` for a run with ``options``, of the ``releases`` that can be its release (newest
    first; ``plan.check_cell``), and the version of a build of the users' own; Pin(None) where the cell names its
    release itself and builds it."""
    compat = compat or load()
    own = own_build.pin(cell, options, compat)
    if own is not None:
        _say(cell.id, own.said)
        return own
    if cell.torch != LATEST:
        return Pin(None)
    newest = releases[0].version
    latest = f"latest is {newest}"
    if options.compiles:
        _say(cell.id, f"{latest}; compiling it from the checkout")
        return Pin(newest)
    if options.wheel is not None:
        given = _wheel_release(options.wheel)
        if given is None or given == newest:
            return Pin(newest)
        _say(cell.id, f"{latest}; --wheel {options.wheel.name} is {given}: using it")
        return Pin(given)
    query = probe(cell, releases[0], compat)
    candidates = [r.version for r in releases]
    record = options.cache_dir / MEMO
    found = newest_available(query, candidates, compat, record, fresh=options.force, verbose=options.verbose)
    if found is None:
        tags = query.wheel_tags
        label = f"+{query.local_version}" + (" (or unlabelled)" if query.unlabelled else "")
        raise UserError(
            f"{cell.id}: the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, "
            f"constraints) offer no prebuilt torch wheel {label} for {tags.interpreter}-{tags.abi}-{tags.platform} "
            f"of any release that supports this cell ({one_of(candidates[:3])}, ...). Point pip at an index that "
            "has one, give one with --wheel PATH, or compile with --source-dir/--git-ref."
        )
    why = _cuda_reason(cell, candidates, found)
    if found == newest:
        _say(cell.id, f"{latest}; the configured indexes offer it for this cell{why}")
    else:
        _say(cell.id, f"{latest}; the configured indexes offer {found} for this cell{why}: using it")
    return Pin(found)


def _cuda_reason(cell: Cell, candidates: Sequence[str], found: str) -> str:
    """Why a linux CUDA cell took PyPI's unlabelled wheel of ``found``, and why not the newer ones (their unlabelled
    wheels are another CUDA's builds, cuda_wheels.yaml); empty for other cells."""
    if not cuda_wheels.unlabelled_cuda(cell.platform, found, cell.cuda):
        return ""
    why = f" (PyPI's unlabelled {found} wheel is its CUDA {cell.cuda} build, and its CUDA libraries' pins resolve"
    newer = candidates[: candidates.index(found)]
    other: dict[str, list[str]] = {}
    for release in newer:
        record = cuda_wheels.release_record(cell.platform, release)
        if record is not None and record.cuda and record.cuda != cell.cuda:
            other.setdefault(record.cuda, []).append(release)
    for cuda, releases in sorted(other.items()):
        span = f"{releases[0]}'s is" if len(releases) == 1 else f"{releases[-1]}-{releases[0]}'s are"
        why += f"; {span} CUDA {cuda}"
    return why + ")"


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

    def final(cell: Cell) -> Plan:
        chosen = choose(cell, releases[cell.id], options, compat)
        release = chosen.release
        torch = next((r for r in releases[cell.id] if release is None or r.version == release), None)
        torch = torch or compat.release(release or "")  # a --wheel of a release the cell would not choose
        offered = pin_companions.offered(cell, torch, matrix, options, compat) if torch else {}
        local = probe(cell, torch, compat).local_version if torch else CPU
        compiled = companion_checkouts.read(matrix, options, chosen.own, local)
        return resolve(cell, matrix, compat, release, offered, own=chosen.own, compiled=compiled)

    return _each(cells, final)


def pin_to_record(cell: Cell, matrix: Matrix, root: Path) -> Plan:
    """The Plan of a cell as the build job that recorded ``build/<cell-id>/state.json`` resolved it (the smoke
    command runs on another machine, whose indexes may offer other releases)."""
    path = state.path_of(root, work_dir_of(cell))
    recorded = state.recorded_release(path)
    own = state.recorded_own_build(path)
    pinned = recorded if cell.torch == LATEST or own is not None else None
    return resolve(cell, matrix, pinned=pinned, offered=pin_companions.recorded(path), own=own,
                   compiled=companion_checkouts.recorded(path))  # fmt: skip
