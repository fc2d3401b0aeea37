"""Runs the stages of each cell in order, records them in ``build/<cell-id>/state.json``, resumes, reports.

The runner sees only final Plans (``pin/pin.py`` resolved ``latest`` before it starts). Each stage declares the artifact
names it reads and writes (``torchbuild/stages``); before anything runs, the runner refuses a stage that reads a
name no earlier stage writes (run/flow.py), and a stage gets only the artifacts it declared it reads.

A stage is skipped on a rerun when its recorded input key (the Plan, the run options that shape its output and the
sha256 of every artifact it reads) is unchanged and its recorded outputs are still there: an output whose size and
mtime are as recorded is trusted; one whose mtime changed is hashed again and must have the recorded sha256.
``--force`` reruns everything. A failed stage stops its cell; later stages are reported as not run.

A stage starts when every earlier stage is done, less those it declares it runs beside (``Stage.beside``; on a host
of the cell's platform the wheel's smoke runs beside conda and verify, the conda package's beside verify): it may
run while they do, and is recorded as itself; a stage that waits for it waits for it to end. Once a stage failed,
nothing more starts: the stages still running end and are recorded, the rest are "not run". A stage that meets a
fault of the machine (a full or read-only disk: an OSError) fails like any other, and the report says so.

One run at a time per working directory: ``run`` holds ``build/.torchbuild.lock`` (a second run is refused, naming
it), removes the summary report and the own reports of the cells it runs (so that a report on disk is never older
than its cell's state, also after a crash) and the scratch killed runs left in memory, before the first stage
starts. After the run each cell's own report is written in build/<cell-id>/ and the summary in build/ is rebuilt from
every cell's own report there: cells built by earlier runs in the same build/ stay in it. Interrupted (SIGINT,
SIGTERM, SIGHUP: see commands/cli.py), nothing more starts, and the scratch of the stages running is removed at once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from torchbuild.channels import conda_name_of, requirement_of
from torchbuild.channels import install_lines as install_lines_of
from torchbuild.channels.backends import open_channel
from torchbuild.channels.nightly import is_nightly
from torchbuild.config import environment
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed, UserError, os_error
from torchbuild.host import locks, progress, scratch, signals
from torchbuild.host.console import check_times, console, heading, step_done, step_start
from torchbuild.plan import SMOKE_STAGES, Plan
from torchbuild.results import Artifact, StageResult, sha256_of
from torchbuild.run import report, repro, state
from torchbuild.run.flow import check_flow, pipeline, waits_for
from torchbuild.run.records import EXIT_UNVERIFIED, CellRun, StageRecord, reaches_channel
from torchbuild.run.state import State
from torchbuild.stages import Context, Stage, declares, is_era_artifact, publish, published_kind

ARCHIVES = (".whl", ".conda", ".tar.bz2")  # outputs whose members a rebuild of the same inputs must reproduce

StageFunction = Callable[[Context], StageResult]
EXIT_CODES = {"passed": 0, "failed": 1, "unverified": EXIT_UNVERIFIED}


def input_key(stage: Stage, plan: Plan, options: RunOptions, inputs: Mapping[str, Artifact]) -> str:
    shaping = {name: str(getattr(options, name)) for name in stage.shaped_by}
    payload = {
        "stage": stage.name,
        "plan": _keyed_plan(stage, plan),
        "options": shaping,
        "inputs": {name: a.sha256 for name, a in sorted(inputs.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _keyed_plan(stage: Stage, plan: Plan) -> dict[str, object]:
    """The Plan's fields that decide whether ``stage``'s last result still holds: not the channel; the user test
    only for the smoke stages (a changed test_command reruns them, not the build), and only where there is one."""
    fields = {k: v for k, v in plan.to_dict().items() if k != "channel"}
    test = fields.pop("user_test")
    if test is not None and stage.name in SMOKE_STAGES:
        fields["user_test"] = test
    return fields


def _mtimes(outputs: Mapping[str, Artifact]) -> dict[str, int]:
    return {name: a.path.stat().st_mtime_ns for name, a in outputs.items() if a.path.is_file()}


def intact(record: StageRecord) -> bool:
    """Every recorded output is still the file that was recorded (see the module's docstring)."""
    for name, artifact in record.outputs.items():
        path = artifact.path
        if not path.is_file():
            return False
        stat = path.stat()
        if stat.st_size != artifact.size:
            return False
        if stat.st_mtime_ns != record.mtimes.get(name) and sha256_of(path) != artifact.sha256:
            return False
    return True


def _reusable(stage: Stage, previous: StageRecord | None, key: str, options: RunOptions, plan: Plan) -> bool:
    return (
        not options.force
        and not stage.always_runs(options, plan)
        and previous is not None
        and previous.key == key
        and previous.status in ("passed", "skipped")
        and intact(previous)
    )


def _run_stage(
    stage: Stage, function: StageFunction, ctx: Context, key: str, origin: float, announce: bool = True
) -> StageRecord:
    """``stage`` run; its record's ``start`` counts from ``origin`` (the cell's start, time.monotonic())."""
    if announce:
        step_start(stage.name)
    started = time.monotonic()

    def record(status: str, message: str, **fields: Any) -> StageRecord:
        return StageRecord(stage.name, status, time.monotonic() - started, message, key, start=started - origin,
                           **fields)  # fmt: skip

    progress.started(stage.name)
    try:
        result = function(ctx)
    except UserError as exc:
        message = str(exc) if isinstance(exc, StageFailed) else f"{stage.name}: {exc}"
        return record("failed", message, checks=list(exc.checks) if isinstance(exc, StageFailed) else [])
    except OSError as exc:  # the machine's fault, not the input's: a full or read-only disk, a file gone
        return record("failed", f"{stage.name}: {os_error(exc)}")
    finally:
        progress.ended(stage.name)
    undeclared = sorted(name for name in result.outputs if not declares(stage.writes, name))
    if undeclared:
        return record("failed", f"{stage.name}: wrote {', '.join(undeclared)}, which it does not declare (it writes "
                      f"{stage.writes})")  # fmt: skip
    return record(result.status, result.message, outputs=dict(result.outputs), checks=list(result.checks),
                  mtimes=_mtimes(result.outputs), ran_on=result.ran_on)  # fmt: skip


def _reproduced(record: StageRecord, previous: StageRecord, before: Mapping[str, dict[str, str]]) -> str:
    """The stage's message, with what differs from its last build of the same inputs (the members of the archives
    it makes: their bytes must not depend on when or where they were made)."""
    notes = []
    for name, artifact in record.outputs.items():
        old = previous.outputs.get(name)
        if old is not None and old.sha256 != artifact.sha256 and name in before:
            changed = repro.differences(before[name], repro.fingerprint(artifact.path))
            notes.append(repro.describe(artifact.path.name, changed))
    return "; ".join(part for part in (record.message, *notes) if part)


@dataclasses.dataclass(frozen=True)
class _Job:
    stage: Stage
    function: StageFunction
    ctx: Context
    key: str
    same_inputs: StageRecord | None  # the last passed run of the same inputs, if any (for the reproducibility note)
    before: Mapping[str, dict[str, str]]  # that run's archives, fingerprinted before they are made again


class _CellRun:
    """One cell's stages as they start and end: what is available, what each recorded, the state file."""

    def __init__(self, plan: Plan, root: Path, options: RunOptions, functions: Mapping[str, StageFunction]) -> None:
        self.plan, self.root, self.options, self.functions = plan, root, options, functions
        self.state = State.load(state.path_of(root, plan.work_dir))
        self.available: dict[str, Artifact] = {}
        self.records: dict[str, StageRecord] = {}
        self.origin = time.monotonic()  # the cell's start: each record's ``start`` counts from it
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    @property
    def failed(self) -> bool:
        """The cell can no longer reach a channel (records.reaches_channel): nothing more starts."""
        return not reaches_channel(CellRun(self.plan, list(self.records.values())).status)

    def prepare(self, stage: Stage) -> _Job | StageRecord:
        """The job that runs ``stage``, or its cached record when its last run still holds (recorded already)."""
        inputs = {name: artifact for name, artifact in self.available.items() if declares(stage.reads, name)}
        key = input_key(stage, self.plan, self.options, inputs)
        previous = self.state.stages.get(stage.name)
        if previous is not None and _reusable(stage, previous, key, self.options, self.plan):
            record = dataclasses.replace(previous, status="cached", duration=0.0, mtimes=_mtimes(previous.outputs),
                                         start=time.monotonic() - self.origin)  # fmt: skip
            record.message = f"unchanged since last run ({previous.status})"
            self.records[stage.name] = record
            self.available.update(previous.outputs)
            self.state.stages[stage.name] = dataclasses.replace(previous, mtimes=record.mtimes)
            step_done(stage.name, record.status, 0.0, record.message)
            return record
        function = self.functions.get(stage.name) or stage.run
        ctx = Context(plan=self.plan, root=self.root, options=self.options, inputs=inputs)
        same = previous if previous is not None and previous.key == key and previous.status == "passed" else None
        same = None if stage.copies_inputs else same
        archives = {n: a for n, a in same.outputs.items() if a.path.name.endswith(ARCHIVES)} if same else {}
        before = {name: repro.fingerprint(artifact.path) for name, artifact in archives.items()}
        return _Job(stage, function, ctx, key, same, before)

    def finish(self, job: _Job, record: StageRecord, end_group: bool) -> None:
        if job.same_inputs is not None and record.status == "passed":
            record.message = _reproduced(record, job.same_inputs, job.before)
        self.available.update(record.outputs)
        self.records[job.stage.name] = record
        if record.status == "failed":
            self.state.stages.pop(job.stage.name, None)
        else:
            self.state.stages[job.stage.name] = record
        self.state.save(self.plan)
        step_done(job.stage.name, record.status, record.duration, record.message, record.outputs, end_group=end_group)
        if self.options.verbose:
            check_times(record.checks)


def run_cell(
    plan: Plan,
    root: Path,
    options: RunOptions,
    stages: Mapping[str, StageFunction] | None = None,
) -> CellRun:
    """Run every stage of ``plan``. ``stages`` replaces the functions of the stages it names (their declarations
    stay): the smoke command replays the build job's stages this way, and tests hand over artifacts.

    A stage that can start while no other runs or can start runs in this thread (a compile of hours stays
    interruptible); stages that run beside each other run in threads of their own."""
    declared = pipeline()
    check_flow(declared)
    waits = waits_for(declared)
    cell_run = _CellRun(plan, root, options, stages or {})
    heading(f"[bold]{plan.cell_id}[/]  torch {plan.version}  ({plan.root.conda.filename})")
    pending = list(declared)
    running: dict[concurrent.futures.Future[StageRecord], _Job] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(declared))
    try:
        while pending or running:
            done = cell_run.records
            ready = [] if cell_run.failed else [s for s in pending if all(w in done for w in waits[s.name])]
            if ready:
                stage = ready[0]
                pending.remove(stage)
                job = cell_run.prepare(stage)
                if isinstance(job, StageRecord):
                    continue
                if not running and len(ready) == 1:
                    record = _run_stage(stage, job.function, job.ctx, job.key, cell_run.origin)
                    cell_run.finish(job, record, end_group=True)
                    continue
                alongside = [j.stage.name for j in running.values()]
                step_start(stage.name + (f" (beside {', '.join(alongside)})" if alongside else ""),
                           group=not alongside)  # fmt: skip
                running[pool.submit(_run_stage, stage, job.function, job.ctx, job.key, cell_run.origin, False)] = job
                continue
            if not running:
                break  # what is left waits for a stage that failed
            finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                cell_run.finish(job, future.result(), end_group=not running)
    except KeyboardInterrupt:
        # Nothing more starts; the stages running lose their scratch now and end at their next step.
        pool.shutdown(wait=False, cancel_futures=True)
        signals.end_children()
        scratch.remove_own()
        raise
    except BaseException:
        pool.shutdown()
        raise
    pool.shutdown()
    for stage in pending:
        cell_run.records[stage.name] = StageRecord(stage.name, "not run", message="an earlier stage failed")
    cell_run.state.save(plan)
    records = [cell_run.records[stage.name] for stage in declared]
    return CellRun(plan=plan, records=records, started=cell_run.started, seconds=time.monotonic() - cell_run.origin)


def run(
    plans: Sequence[Plan],
    root: Path,
    options: RunOptions,
    stages: Mapping[str, StageFunction] | None = None,
) -> int:
    """Run every plan; write the reports; return the exit code: 0 every cell passed, 1 a cell failed, 3
    (EXIT_UNVERIFIED) none failed and a cell is unverified."""
    build = root / "build"
    with workspace(build, plans), progress.heartbeat():
        cells = [run_cell(plan, root, options, stages) for plan in plans]
        paths = report.write(cells, build)
    report.print_summary(cells, paths, install_lines(cells, root))
    code = EXIT_CODES[report.run_status(c.status for c in cells)]
    _append_step_summary(report.markdown(report.as_dict([report.cell_entry(c, build) for c in cells])), code,
                         paths.markdown)  # fmt: skip
    return code


def _append_step_summary(markdown: str, code: int, report_path: Path) -> None:
    """This run's Markdown report added to $GITHUB_STEP_SUMMARY. The summary is an extra: a full disk or an unwritable
    file there is said, naming both, with the run's own result, which it does not change."""
    summary = environment.step_summary()
    if summary is None:
        return
    try:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown)
    except OSError as exc:
        result = {0: "passed", EXIT_UNVERIFIED: "ended unverified"}.get(code, "failed")
        console.print(
            f"[yellow]warning:[/] {environment.STEP_SUMMARY}={summary}: the report was not added to the job's summary "
            f"({exc.strerror or exc}). The run itself {result} (exit {code}); its report is {report_path}.",
            highlight=False,
            soft_wrap=True,
        )


def install_lines(cells: Sequence[CellRun], root: Path) -> list[str]:
    """How to install what the cells' publish stages published, per channel (a line naming it, then conda's line and
    a pip line per cell's set of wheels; nightlies from their own label and index)."""
    names: dict[tuple[str, bool], tuple[set[str], list[list[str]]]] = {}
    for cell in cells:
        publish_record = next((r for r in cell.records if r.stage == publish.NAME), None)
        if publish_record is None or publish_record.status != "passed":
            continue
        wheels_of: dict[bool, list[str]] = {}
        for name, artifact in cell.artifacts.items():
            night = is_nightly(artifact.path.name)
            conda, wheel_sets = names.setdefault((cell.plan.channel, night), (set(), []))
            if published_kind(name) == "conda" and not is_era_artifact(name):
                conda.add(conda_name_of(artifact.path.name))
            elif published_kind(name) == "wheel":
                wheels_of.setdefault(night, []).append(requirement_of(artifact.path.name))
        for night, wheels in wheels_of.items():
            names[(cell.plan.channel, night)][1].append(wheels)
    lines = []
    for spec in dict.fromkeys(spec for spec, _night in names):
        channel = open_channel(spec, root)
        lines.append(f"published to {channel.url}; install with:")
        for night in (False, True):
            conda, wheel_sets = names.get((spec, night), (set(), []))
            lines += [f"  {line}" for line in install_lines_of(channel, conda, wheel_sets, night=night)]
    return lines


LOCK = ".torchbuild.lock"


@contextlib.contextmanager
def workspace(build: Path, plans: Sequence[Plan] = ()) -> Iterator[None]:
    """This run alone in ``build`` (see the module's docstring), with the summary report, the reports of the cells
    of ``plans`` and killed runs' scratch gone."""
    try:
        build.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{build} cannot be made ({os_error(exc)}): run where you can write.") from None
    busy = (
        f"another torchbuild run is using {build} (two runs in one directory would overwrite each other's state, "
        "artifacts and report): wait for it to end, or run in another directory"
    )
    with locks.held(build / LOCK, busy=busy):
        report.remove_stale(build, plans)
        scratch.remove_leftovers()
        yield
