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
import json
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from torchbuild.config.compat import Compat, load
from torchbuild.config.matrix import LATEST, Cell, Matrix
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, one_of
from torchbuild.host import pip
from torchbuild.host.console import console
from torchbuild.plan import Plan, resolve
from torchbuild.run import index_memo

MEMO = "index-answers.json"  # in the cache directory (index_memo.py)


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


def _unlabelled(compat: Compat, plan: Plan, release: str) -> bool:
    rules = compat.packaging.unlabelled_wheels
    return any(r.applies(plan.platform, release, plan.cuda) and r.value == plan.local_version for r in rules)


def newest_available(
    plan: Plan, releases: Sequence[str], compat: Compat | None = None, record: Path | None = None, fresh: bool = False
) -> str | None:
    """Of ``releases`` (newest first), the newest whose prebuilt wheel of the Plan's build the configured indexes
    offer for the Plan's Python and platform; None if none. ``record``: where index_memo keeps the indexes'
    answer (None: always ask, keep nothing); ``fresh``: ask even where the record holds."""
    compat = compat or load()
    offered = _offered(tuple(plan.pip_target), record, fresh)
    for release in releases:
        if Version(f"{release}+{plan.local_version}") in offered:
            return release
        if _unlabelled(compat, plan, release) and Version(release) in offered:
            return release
    return None


def _wheel_release(wheel: Path) -> str | None:
    """The release of a torch wheel file name (2.13.0 for torch-2.13.0+cpu-...); None if it is not one."""
    try:
        _name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename:
        return None  # the source stage names the problem
    return version.public


def _say(plan: Plan, line: str) -> None:
    console.print(f"[bold]{plan.cell_id}[/]: {line}", highlight=False)


def pin(cell: Cell, matrix: Matrix, options: RunOptions, compat: Compat | None = None) -> Plan:
    """The final Plan of ``cell`` for a run with ``options``."""
    compat = compat or load()
    plan = resolve(cell, matrix, compat)
    if plan.torch_requested != LATEST:
        return plan
    latest = f"latest is {plan.torch}"
    if options.compiles:
        _say(plan, f"{latest}; compiling it from the checkout")
        return plan
    if options.wheel is not None:
        given = _wheel_release(options.wheel)
        if given is None or given == plan.torch:
            return plan
        _say(plan, f"{latest}; --wheel {options.wheel.name} is {given}: using it")
        return resolve(cell, matrix, compat, pinned=given)
    candidates = [r.version for r in reversed(compat.releases) if r.supports(plan.platform, plan.cuda, plan.python)]
    found = newest_available(plan, candidates, compat, options.cache_dir / MEMO, fresh=options.force)
    if found is None:
        tags = plan.wheel_tags
        label = f"+{plan.local_version}" + (" (or unlabelled)" if plan.prebuilt_unlabelled else "")
        raise UserError(
            f"{plan.cell_id}: the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, "
            f"constraints) offer no prebuilt torch wheel {label} for {tags.interpreter}-{tags.abi}-{tags.platform} "
            f"of any release that supports this cell ({one_of(candidates[:3])}, ...). Point pip at an index that "
            "has one, give one with --wheel PATH, or compile with --source-dir/--git-ref."
        )
    if found == plan.torch:
        _say(plan, f"{latest}; the configured indexes offer it for this cell")
        return plan
    _say(plan, f"{latest}; the configured indexes offer {found} for this cell: using it")
    return resolve(cell, matrix, compat, pinned=found)


def pin_all(cells: Sequence[Cell], matrix: Matrix, options: RunOptions) -> list[Plan]:
    compat = load()
    plans = []
    for cell in cells:
        try:
            plans.append(pin(cell, matrix, options, compat))
        except UserError as exc:
            if len(cells) == 1:
                raise
            raise type(exc)(f"cell {cell.id}: {exc}") from None
    return plans


def pin_to_record(cell: Cell, matrix: Matrix, root: Path) -> Plan:
    """The Plan of a cell as the build job that recorded ``build/<cell-id>/state.json`` resolved it (the smoke
    command runs on another machine, whose indexes may offer other releases)."""
    plan = resolve(cell, matrix)
    state = root / plan.work_dir / "state.json"
    try:
        recorded = json.loads(state.read_text(encoding="utf-8"))["plan"]["torch"]
    except (OSError, ValueError, KeyError, TypeError):
        return plan  # the smoke command names what is wrong with the state file
    if plan.torch_requested == LATEST and isinstance(recorded, str) and recorded != plan.torch:
        return resolve(cell, matrix, pinned=recorded)
    return plan
