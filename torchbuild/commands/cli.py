"""Argument parsing and dispatch only. ``python pipeline.py --help``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from torchbuild.channels.local import check_directory
from torchbuild.commands import history as history_cmd
from torchbuild.commands import publish as publish_cmd
from torchbuild.commands import sbom as sbom_cmd
from torchbuild.commands import values
from torchbuild.commands.plan_view import print_plan, say_companions, say_declared, say_resolution
from torchbuild.commands.selection import (
    add_selectors,
    default_platform,
    load_matrix,
    resolve_all,
    select_cells,
)
from torchbuild.conda.assembly import COMPRESSION_LEVELS, COMPRESSORS
from torchbuild.config import environment
from torchbuild.config.channel_spec import local_path
from torchbuild.config.matrix import Matrix
from torchbuild.config.option_fields import choices, default
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError, os_error
from torchbuild.host import scratch, signals
from torchbuild.host.console import adapt_streams, console, out
from torchbuild.host.files import unwritable
from torchbuild.knowledge.cache_folder import user_cache_dir
from torchbuild.knowledge.compat import load
from torchbuild.pin import pin
from torchbuild.plan import Plan
from torchbuild.run.records import EXIT_UNVERIFIED

COMMANDS = ("run", "plan", "matrix", "smoke", "publish", "index", "doctor", "sbom", "history")
CHANNELS = "DIR|s3://BUCKET/PREFIX|anaconda://OWNER[/LABEL]"  # what --channel takes


def cache_help() -> str:
    """Asked when the parser is built: the user's cache folder follows XDG_CACHE_HOME as it is then."""
    return f"download cache (default: {user_cache_dir()}, the user's cache folder)"


def invocation() -> str:
    """The command the user typed, for usage text: ``torchbuild`` (the installed command) or ``python pipeline.py``."""
    name = Path(sys.argv[0]).name or "torchbuild"
    return f"python {name}" if name.endswith(".py") else name


def build_parser() -> argparse.ArgumentParser:
    command = invocation()
    parser = argparse.ArgumentParser(
        prog=Path(sys.argv[0]).name or "torchbuild",
        description="Build, repair, package, verify and publish PyTorch for each cell of matrix.yaml.",
        epilog=f"Without a command, 'run' is meant: {command} --cuda cpu --py 3.11. Exit status: 0 every cell "
        f"passed, 1 a cell failed, 2 bad input, {EXIT_UNVERIFIED} none failed but a cell is unverified (a check "
        "could not run: the run's last lines say which, and what runs it).",
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    run = sub.add_parser("run", help="run the stages for the selected cells (the default command)")
    add_selectors(run)
    run.add_argument("--channel", metavar=CHANNELS,
                     help="publish to this channel (default: the matrix's, a local 'channel/')")  # fmt: skip
    run.add_argument("--wheel", metavar="FILE", type=values.path,
                     help="use this prebuilt wheel as the source (a release, or your own build)")  # fmt: skip
    run.add_argument(
        "--build-version",
        metavar="VERSION|nightly",
        type=values.text,
        help="the version the artifacts carry (e.g. 2.16.0.dev20261128, or 'nightly' for a compile), instead of the "
        "source's own (a checkout's: version.txt+git<sha7>)",
    )
    run.add_argument("--force", action="store_true", help="rerun stages that are already done")
    run.add_argument("--replace", action="store_true", help="publish: replace a different file under a published name")
    conda_format = default(RunOptions, "conda_format")
    run.add_argument(
        "--format",
        choices=choices(RunOptions, "conda_format"),
        default=conda_format,
        help=f"conda package format (default: {conda_format})",
    )
    level, threads = default(RunOptions, "compression_level"), default(RunOptions, "compression_threads")
    run.add_argument(
        "--compression-level",
        metavar="N",
        type=int,
        default=level,
        help=f"zstd (1-22) or bzip2 (1-9) level of the conda package (default: {level})",
    )
    run.add_argument("--compression-threads", metavar="N", type=int, default=threads,
                     help=f"compression threads (default: {threads})")  # fmt: skip
    run.add_argument(
        "--repodata",
        metavar="DIR",
        type=values.path,
        help=f"stored conda repodata (<channel>/<subdir>/repodata.json) to prove the package solvable against, "
        f"offline (default: ${environment.REPODATA}; without either, the live channels, cached; where they cannot be "
        f"reached the cell ends unverified, exit {EXIT_UNVERIFIED})",
    )
    run.add_argument("--cache-dir", metavar="DIR", type=values.path, default=None, help=cache_help())
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show what the probes that are expected to fail said, and each check's time (slowest first)",
    )
    source = run.add_argument_group("compiling from source (instead of a prebuilt wheel)")
    source.add_argument("--source-dir", metavar="DIR", type=values.path,
                        help="compile this PyTorch checkout (with its submodules)")  # fmt: skip
    source.add_argument(
        "--git-ref",
        metavar="REF",
        type=values.text,
        help="clone this tag, branch or full commit SHA (e.g. v2.5.1) with submodules, and compile it",
    )
    git_url = default(RunOptions, "git_url")
    source.add_argument("--git-url", metavar="URL", type=values.text,
                        help=f"repository for --git-ref (default: {git_url})")  # fmt: skip
    plan = sub.add_parser("plan", help="print the resolved plan; nothing is run")
    add_selectors(plan)
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.add_argument(
        "--ask-indexes", action="store_true", help="pin 'latest' and the companions to what the indexes offer, as a run"
    )
    mat = sub.add_parser("matrix", help="list the cells of the matrix")
    add_selectors(mat)
    mat.add_argument("--github", action="store_true", help="JSON for a GitHub Actions strategy.matrix")
    mat.add_argument(
        "--estimate", action="store_true", help="runner hours and billed minutes of one nightly of these cells"
    )
    smoke = sub.add_parser(
        "smoke", help="only the smoke stages of one cell, on the build/ another machine made (the nightly's GPU job)"
    )
    add_selectors(smoke)
    publish_cmd.add_parsers(sub)
    sbom_cmd.add_parser(sub)
    history_cmd.add_parser(sub)
    doctor = sub.add_parser(
        "doctor", help="what compiling the selected cells needs on this host: found or missing, with fixes"
    )
    add_selectors(doctor)
    doctor.add_argument("--cache-dir", metavar="DIR", type=values.path, default=None, help=cache_help())
    return parser


def github_matrix(plans: Sequence[Plan], conda_builder: str = "rattler-build") -> dict[str, object]:
    """The nightly's strategy.matrix; ``conda-builder`` says which tool the win-64 build jobs also package with
    (matrix.yaml build.conda_builder: conda-build runs the rendered recipe on the runner's Miniconda)."""
    runners = load().packaging.github_runners
    return {
        "include": [
            {
                "cell": p.cell_id,
                "platform": p.platform,
                "cuda": p.cuda,
                "python": p.python,
                "torch": p.torch,
                "runs-on": runners[p.platform],
                "conda-builder": conda_builder,
            }
            for p in plans
        ]
    }


def cmd_plan(args: argparse.Namespace) -> int:
    matrix = load_matrix(args)
    cells = select_cells(matrix, args)
    if args.ask_indexes:
        plans = pin.pin_all(cells, matrix, RunOptions(), pin.check_all(cells, matrix))
    else:
        plans = resolve_all(matrix, cells)
    if args.json:  # always a list, one plan per cell, however many are selected
        print(json.dumps([p.to_dict() for p in plans], indent=2, sort_keys=True))
        return 0
    say_resolution(plans, asked=args.ask_indexes)
    for plan in plans:
        print_plan(plan)
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    if args.github and args.estimate:
        raise UserError(
            "--github and --estimate both choose what 'matrix' prints (the JSON for GitHub Actions, or the runner "
            "hours): give one of them."
        )
    matrix = load_matrix(args)
    plans = resolve_all(matrix, select_cells(matrix, args))
    if args.github:
        payload = github_matrix(plans, matrix.build.conda_builder)
        print(json.dumps(payload, separators=(",", ":"), sort_keys=True))
        return 0
    if args.estimate:
        from torchbuild.commands import estimate

        out.print(estimate.render(estimate.for_github_matrix(github_matrix(plans))), markup=False)
        return 0
    for plan in plans:
        out.print(f"{plan.cell_id:40} torch {plan.torch:8} {plan.root.wheel}")
    return 0


def check_compression(args: argparse.Namespace) -> None:
    if args.compression_level not in COMPRESSION_LEVELS[args.format]:
        valid = "; ".join(
            f"{r.start} to {r.stop - 1} with --format {f} ({COMPRESSORS[f]})" for f, r in COMPRESSION_LEVELS.items()
        )
        raise UserError(
            f"--compression-level {args.compression_level} does not fit --format {args.format}. Valid levels: {valid}."
        )
    if args.compression_threads < 1:
        raise UserError(f"--compression-threads {args.compression_threads}: give 1 or more.")


def check_paths(args: argparse.Namespace) -> None:
    """Paths the user gave must be there: a flag that names a missing file would do nothing, or fail later."""
    if args.wheel is not None and not args.wheel.is_file():
        what = "is a directory" if args.wheel.is_dir() else "no such file"
        raise UserError(f"--wheel {args.wheel}: {what}; give the path of a torch .whl file.")
    if args.source_dir and not args.source_dir.is_dir():
        raise UserError(f"--source-dir {args.source_dir}: no such directory (give the root of a PyTorch checkout).")
    if args.repodata is not None and not args.repodata.is_dir():
        raise UserError(
            f"--repodata {args.repodata}: no such directory; give a directory with <channel>/<subdir>/repodata.json, "
            "or leave --repodata out to solve against the live channels."
        )


def run_options(args: argparse.Namespace) -> RunOptions:
    check_compression(args)
    sources = (("--wheel", args.wheel), ("--source-dir", args.source_dir), ("--git-ref", args.git_ref))
    given = [flag for flag, value in sources if value]
    if len(given) > 1:
        raise UserError(f"{' and '.join(given)} both name the source: give one of --wheel, --source-dir or --git-ref.")
    if args.git_url is not None and not args.git_ref:
        raise UserError(
            f"--git-url {args.git_url} names the repository --git-ref is cloned from, and no --git-ref is given: "
            "add --git-ref (a tag, branch or commit SHA, e.g. v2.5.1), or leave --git-url out."
        )
    check_paths(args)
    # absolute: a relative 'rd' would be a channel name to rattler
    repodata = args.repodata.resolve() if args.repodata else environment.repodata()
    asked = {"git_url": args.git_url, "cache_dir": args.cache_dir}  # None: not given, the RunOptions default
    return RunOptions(
        **{name: value for name, value in asked.items() if value is not None},
        wheel=args.wheel.resolve() if args.wheel else None,
        force=args.force,
        replace=getattr(args, "replace", False),
        conda_format=args.format,
        compression_level=args.compression_level,
        compression_threads=args.compression_threads,
        repodata=repodata,
        source_dir=args.source_dir.resolve() if args.source_dir else None,
        git_ref=args.git_ref,
        verbose=args.verbose,
        build_version=args.build_version,
    )


def with_matrix_source(options: RunOptions, matrix: Matrix) -> RunOptions:
    """The matrix's ``torch: {git_ref, git_url, build_version}`` (the nightly of a branch) where the command line
    names no source of its own."""
    source = matrix.source
    if source is None or options.wheel is not None or options.compiles:
        return options
    return replace(
        options,
        git_ref=source.git_ref,
        git_url=source.git_url or options.git_url,
        build_version=options.build_version or source.build_version,
    )


def check_writable(directories: dict[str, Path | None]) -> None:
    """The directories a run writes into (what -> path): refused now, not by a stage after hours of build."""
    for what, path in directories.items():
        problem = unwritable(path) if path is not None else None
        if problem:
            raise UserError(f"{what} {path} {problem}: give a directory you can write to.")


def cmd_run(args: argparse.Namespace) -> int:
    from torchbuild.run import runner

    options = run_options(args)
    matrix = load_matrix(args)
    options = with_matrix_source(options, matrix)
    cells = select_cells(matrix, args)
    candidates = pin.check_all(cells, matrix)  # every cell valid before any index is asked
    channel_dir = local_path(matrix.channel, Path.cwd())
    if channel_dir is not None:
        check_directory(channel_dir)
    check_writable({"--cache-dir": options.cache_dir, "channel": channel_dir, "the work folder": Path.cwd() / "build"})
    if options.wheel is not None and len(cells) != 1:
        raise UserError(f"--wheel gives the wheel of one cell, but {len(cells)} cells are selected: add --cuda/--py.")
    from torchbuild.commands import doctor

    compiled = ["torch"] * options.compiles + [name for name, _source in matrix.package_sources]
    if compiled:  # before anything is asked or run; the toolchain is the cell's, whatever it ships
        toolchains = resolve_all(replace(matrix, packages=None, package_sources=()), cells)
        doctor.refuse_missing(toolchains, compiled, options.cache_dir)
    plans = pin.pin_all(cells, matrix, options, candidates)
    say_companions(plans)
    say_declared(plans)
    return runner.run(plans, root=Path.cwd(), options=options)


def cmd_smoke(args: argparse.Namespace) -> int:
    from torchbuild.commands import smoke as smoke_job

    matrix = load_matrix(args)
    cells = select_cells(matrix, args)
    if len(cells) != 1:
        raise UserError(f"smoke takes one cell ({len(cells)} selected): give --only CELL_ID (see 'matrix').")
    pin.check_all(cells, matrix)
    return smoke_job.run(pin.pin_to_record(cells[0], matrix, Path.cwd()), Path.cwd(), RunOptions())


def cmd_doctor(args: argparse.Namespace) -> int:
    from torchbuild.commands import doctor

    matrix = load_matrix(args)
    selected = args.cuda or args.python or args.platform or args.torch or args.only
    cells = select_cells(matrix, args)
    if not selected:  # the whole matrix, as far as this host can build it
        cells = [c for c in cells if c.platform == default_platform()]
        if not cells:
            raise UserError(
                f"{matrix.path} has no {default_platform()} cell, and this host builds {default_platform()}: "
                "select a cell with --only CELL_ID or --cuda/--py/--platform."
            )
    cache_dir = args.cache_dir or user_cache_dir()
    check_writable({"--cache-dir": cache_dir})
    return doctor.report(resolve_all(matrix, cells), cache_dir)


def main(argv: Sequence[str] | None = None) -> int:
    adapt_streams()  # a Windows CI log's cp1252, a C locale's ASCII: every line printed, none an error
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "run")
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"run": cmd_run, "plan": cmd_plan, "matrix": cmd_matrix, "smoke": cmd_smoke, "doctor": cmd_doctor}
    handlers.update(publish=publish_cmd.cmd_publish, index=publish_cmd.cmd_index, sbom=sbom_cmd.cmd_sbom,
                    history=history_cmd.cmd_history)  # fmt: skip
    with signals.stopping_cleanly():
        try:
            environment.check()  # every variable torchbuild reads, before anything runs
            return handlers[args.command](args)
        except UserError as exc:
            console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            return exc.exit_code
        except BrokenPipeError:  # e.g. piped into `head`
            return 0
        except OSError as exc:  # the machine's fault (a full or read-only disk), not the input's: exit 1
            console.print(f"[bold red]error:[/] {escape(os_error(exc))}", highlight=False, soft_wrap=True)
            return 1
        except KeyboardInterrupt:
            signals.end_children()
            scratch.remove_own()
            name, code = signals.stopped_by()
            console.print(f"[bold red]interrupted[/] ({name}): finished stages are kept, scratch and unfinished "
                          "files are removed; rerun the same command to resume.")  # fmt: skip
            return code
