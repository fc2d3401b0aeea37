"""Terminal output: progress and errors on stderr (rich), results on stdout."""

from __future__ import annotations

from rich.console import Console

from torchbuild.plan import Plan

console = Console(stderr=True, highlight=False)
out = Console(highlight=False, soft_wrap=True)


def print_plan(plan: Plan) -> None:
    """Key: value lines (not a table): readable in a narrow terminal and in a CI log alike."""
    rows = [
        ("torch", f"{plan.torch} (asked: {plan.torch_requested}), wheel version {plan.version}"),
        ("platform", plan.platform),
        ("python", plan.python),
        ("cuda", plan.cuda),
        ("cudnn", str(plan.cudnn) if plan.cudnn is not None else "-"),
        ("compiler", _toolchain_line(plan)),
        ("generator", plan.toolchain.generator),
        ("build", f"{plan.build_kind}, build number {plan.build_number}"),
        ("wheel", plan.wheel),
        ("conda", f"{plan.conda.filename} (build number {plan.conda.build_number})"),
        ("depends", ", ".join(plan.conda.depends)),
        ("constrains", ", ".join(plan.conda.constrains) or "-"),
        ("channel", plan.channel),
        ("work dir", plan.work_dir),
        *((f"env {k}", v) for k, v in plan.env.items()),
        *(("note", n) for n in plan.notes),
    ]
    width = max(len(key) for key, _ in rows)
    out.print(f"[bold]plan {plan.cell_id}[/]")
    for key, value in rows:
        out.print(f"  {key:<{width}}  {value}")
    out.print()


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
