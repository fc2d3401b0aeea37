"""The resolved Plan as a person reads it (``pipeline.py plan``)."""

from __future__ import annotations

from collections.abc import Sequence

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from rich.markup import escape

from torchbuild.config.matrix import LATEST
from torchbuild.host.console import console, out
from torchbuild.knowledge.cuda_wheels import RequirementWheel
from torchbuild.plan import Plan


def print_plan(plan: Plan) -> None:
    """Key: value lines (not a table): readable in a narrow terminal and in a CI log alike."""
    redistributable = plan.windows.redistributable_dlls if plan.windows else ()
    loaded_by_name = plan.windows.loaded_by_name if plan.windows else ()
    rows = [
        ("torch", f"{plan.torch} (asked: {plan.torch_requested}), wheel version {plan.version}"),
        ("platform", plan.platform),
        ("python", plan.python),
        ("cuda", plan.cuda),
        ("cudnn", str(plan.cudnn) if plan.cudnn is not None else "-"),
        ("compiler", _toolchain_line(plan)),
        ("generator", plan.toolchain.generator),
        ("build", f"{plan.build_kind}, build number {plan.build_number}, timeout {plan.build_timeout_hours:g} h"),
        ("build deps", ", ".join(f"{d.name} ({d.filename})" for d in plan.build_deps) or "-"),
        ("DLLs from redistributables", ", ".join(redistributable) or "-"),
        ("loaded by name", "; ".join(f"{a} loads {', '.join(b)}" for a, b in loaded_by_name) or "-"),
        *(("declared library", line) for line in declared_lines(plan)),
        *(("added requirement", f"{r.value}: torch imports it undeclared ({r.why})") for r in plan.added_requirements),
        *(("broken script", f"{r.value}: upstream's; the smoke expects it to fail ({r.why})")
          for r in plan.broken_scripts),
        ("left to conda deps", ", ".join(sorted(set(plan.conda.provided_dlls.values()))) or "-"),
        ("wheel", plan.root.wheel),
        ("conda", f"{plan.root.conda.filename} (build number {plan.root.conda.build_number})"),
        ("depends", ", ".join(plan.root.conda.depends)),
        ("vc runtime", _vc_runtime_line(plan)),
        ("constrains", ", ".join(plan.root.conda.constrains) or "-"),
        *((("2018 names", _era_line(plan)),) if not plan.conda.era.empty else ()),
        *((("test command", _test_line(plan)),) if plan.user_test else ()),
        ("channel", plan.channel),
        ("work dir", plan.work_dir),
        *((f"env {k}", v) for k, v in plan.env.items()),
        *((c.name, c.detail) for c in plan.companions),
        *(("note", n) for n in plan.notes),
    ]
    width = max(len(key) for key, _ in rows)
    out.print(f"[bold]plan {plan.cell_id}[/]")
    for key, value in rows:
        out.print(f"  {key:<{width}}  {escape(value)}")  # values are text, never Rich markup
    out.print()


def _test_line(plan: Plan) -> str:
    test = plan.user_test
    assert test is not None
    needs = ", ".join(test.requires) or "nothing"
    return f"{test.command} (after the smoke checks; needs {needs}; {{project}} = {test.project})"


def _era_line(plan: Plan) -> str:
    """What a cell of the 2018 era publishes besides pytorch (era_names.yaml)."""
    era = plan.conda.era
    said = [f"{era.cpu_package} (this package renamed)"] if era.cpu_package else []
    built = {c.name for c in plan.companions if c.built}
    said += [f"{alias} (its {name})" for name, alias in era.companions.items() if name in built]
    if era.selector:
        said.append(f"{era.selector.stem} (track_features {era.selector.name})")
    if era.features:
        said.append(f"this build has features {' '.join(era.features)}")
    return "; ".join(said) or "none; forbids the selectors " + ", ".join(c.split()[0] for c in era.constrains)


def declared_lines(plan: Plan) -> list[str]:
    """One line per library a declared requirement of the wheel installs: left to that requirement, or vendored."""
    said = plan.declared_choice.said
    lines = []
    for wheel in plan.declared_libraries:
        lines.append(f"{_libraries(wheel)}: left to the requirement {_requirement(wheel)} ({said})")
    for wheel in plan.vendored_libraries:
        lines.append(
            f"{_libraries(wheel)}: vendored into the wheel from {wheel.file} (what the wheel's DLLs import of it and "
            f"what those load by name), the requirement {_requirement(wheel)} dropped ({said})"
        )
    return lines or ["- (the wheel declares no requirement that installs libraries)"]


def _libraries(wheel: RequirementWheel) -> str:
    names = wheel.library_names
    files = f"{len(names)} file{'s' if len(names) != 1 else ''}"
    return f"{wheel.name} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}; {files})"


def _requirement(wheel: RequirementWheel) -> str:
    """torch's Requires-Dist that brings ``wheel`` (without its marker), and the wheel it resolves to."""
    declared = str(Requirement(wheel.requirement.split(";")[0]))
    if canonicalize_name(Requirement(declared).name) == wheel.name:
        return declared if declared == wheel.pin else f"{declared} ({wheel.pin})"
    return f"{declared}, through which {wheel.pin}"


def say_declared(plans: Sequence[Plan]) -> None:
    """The run's lines of where each declared library comes from (only for cells whose wheel declares some)."""
    for plan in plans:
        if plan.declared_libraries or plan.vendored_libraries:
            for line in declared_lines(plan):
                console.print(f"[bold]{plan.cell_id}[/]: {escape(line)}", highlight=False, soft_wrap=True)


def _vc_runtime_line(plan: Plan) -> str:
    rule = plan.conda.vc_runtime
    if rule is None:
        return "-"
    upper = f",<{rule.upper}" if rule.upper else ""
    return f"{rule.package} >={rule.minimum}{upper}, or newer where the binaries were linked by a newer MSVC"


def _toolchain_line(plan: Plan) -> str:
    tc = plan.toolchain
    if tc.compiler == "msvc":
        line = f"MSVC {tc.msvc_toolset} (Visual Studio {tc.visual_studio}; vcvarsall.bat {' '.join(tc.vcvarsall_args)})"
        if tc.nvcc:
            line += f", nvcc {tc.nvcc} accepts MSVC {tc.msvc_accepted}"
        return line
    if tc.nvcc:
        return f"gcc {tc.gcc_accepted} (what nvcc {tc.nvcc} accepts)"
    return "gcc"


def say_resolution(plans: Sequence[Plan], asked: bool = False) -> None:
    """One line per cell whose torch was 'latest': the release it resolves to (``asked``: the one the package indexes
    offer, as a run pins it; else the newest the data knows, no index asked)."""
    latest = [plan for plan in plans if plan.torch_requested == LATEST]
    for plan in latest:
        console.print(
            f"[bold]{plan.cell_id}[/]: torch 'latest' resolves to [bold]{plan.torch}[/], the newest release "
            f"with a {plan.platform} build for {'CPU' if not plan.is_cuda else 'CUDA ' + plan.cuda} "
            f"and Python {plan.python}{', that the package indexes offer' if asked else ''}."
        )
    if latest and not asked:
        console.print(
            "(no package index asked: a run takes the newest release, torchvision and torchaudio the indexes offer, "
            "which may be older; 'plan --ask-indexes' asks them)"
        )


def say_companions(plans: Sequence[Plan]) -> None:
    """One line per companion of each cell: the release paired with its torch (built beside it, or why not yet), or
    why none ships."""
    for plan in plans:
        for companion in plan.companions:
            console.print(f"[bold]{plan.cell_id}[/]: {escape(companion.line)}", highlight=False, soft_wrap=True)
