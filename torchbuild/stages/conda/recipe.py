"""Rendering ``torchbuild/recipes/pytorch`` (package data) for one cell: Jinja2 (sandboxed, StrictUndefined), then
conda-build selectors.

Two forms come out of one render:
- the conda-build recipe (selectors kept, for conda-build on a Windows runner with Miniconda), written with
  bld.bat, build.sh and the per-cell ``conda_build_config.yaml`` into the cell's recipe directory;
- the same recipe with selectors applied and parsed, which the conda stage assembles the package from.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # jinja2 is imported where a recipe is rendered: a rerun that renders none does not load it
    from jinja2.sandbox import SandboxedEnvironment

from torchbuild.errors import UserError
from torchbuild.plan import Plan

RECIPE_DIR = Path(str(resources.files("torchbuild").joinpath("recipes/pytorch")))  # package data of torchbuild
SELECTOR = re.compile(r"^(?P<line>.*?)\s*#\s*\[(?P<expr>[^\]]+)\]\s*$")


@dataclass(frozen=True)
class RenderedRecipe:
    directory: Path  # holds meta.yaml, bld.bat, build.sh, conda_build_config.yaml
    meta_yaml: str  # conda-build form, selectors kept
    meta: Mapping[str, Any]  # selectors applied, parsed


_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.Compare,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.In,
    ast.NotIn,
    ast.Tuple,
    ast.List,
)


def evaluate_selector(expr: str, namespace: Mapping[str, object]) -> bool:
    """Evaluate a conda-build selector such as ``win and py>=38`` without eval()'s reach."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise UserError(f"recipe: selector '[{expr}]' is not a valid expression.") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise UserError(f"recipe: selector '[{expr}]' uses {type(node).__name__}, which selectors do not allow.")
        if isinstance(node, ast.Name) and node.id not in namespace:
            raise UserError(f"recipe: selector '[{expr}]' names '{node.id}'; known: {', '.join(sorted(namespace))}.")
    code = compile(tree, "<selector>", "eval")
    return bool(eval(code, {"__builtins__": {}}, dict(namespace)))


def apply_selectors(text: str, namespace: Mapping[str, object]) -> str:
    out = []
    for line in text.splitlines():
        match = SELECTOR.match(line)
        if match is None:
            out.append(line)
        elif evaluate_selector(match["expr"], namespace):
            out.append(match["line"])
    return "\n".join(out) + "\n"


def _environment() -> SandboxedEnvironment:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(RECIPE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def context(
    plan: Plan,
    wheel_path: str,
    wheel_requires: Sequence[str],
    vc_runtime: str | None = None,
    left_out: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        **plan.to_dict(),
        "package": dataclasses.asdict(plan.root),  # the recipe is torch's: the root of Plan.packages
        "accelerator": f"CUDA {plan.cuda}" if plan.is_cuda else "CPU",
        "wheel_path": wheel_path,
        "wheel_requires": list(wheel_requires),
        "vc_runtime": vc_runtime or "",
        "left_out": list(left_out),
    }


def render(
    plan: Plan,
    out_dir: Path,
    wheel_path: str | None = None,
    wheel_requires: Sequence[str] = (),
    vc_runtime: str | None = None,
    left_out: Sequence[str] = (),
) -> RenderedRecipe:
    """Render the recipe for ``plan`` into ``out_dir``.

    ``wheel_path`` is the repaired wheel the recipe installs (the Plan's wheel name under the repair directory
    until the wheel exists); ``wheel_requires`` are conda specs for what the wheel itself requires; ``vc_runtime``
    the VC runtime dependency (win-64; its floor read from the binaries); ``left_out`` the wheel's DLLs (paths in
    site-packages) the package does not install because a run dependency provides them.
    """
    import jinja2

    env = _environment()
    rule = plan.conda.vc_runtime
    if vc_runtime is None and rule is not None:  # no wheel read yet: the rule's minimum
        vc_runtime = f"{rule.package} >={rule.minimum}" + (f",<{rule.upper}" if rule.upper else "")
    repaired = wheel_path or f"{plan.stage_dirs['repair']}/{plan.root.wheel}"
    values = context(plan, repaired, wheel_requires, vc_runtime, left_out)
    try:
        meta_yaml = env.get_template("meta.yaml").render(values)
        variants = env.get_template("conda_build_config.yaml.j2").render(values)
    except jinja2.UndefinedError as exc:
        raise UserError(f"recipe: {RECIPE_DIR / 'meta.yaml'} uses an undefined value: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise UserError(f"recipe: {exc.filename}:{exc.lineno}: {exc.message}") from None
    resolved = apply_selectors(meta_yaml, plan.selectors)
    try:
        meta = yaml.safe_load(resolved)
    except yaml.YAMLError as exc:
        raise UserError(f"recipe: the rendered meta.yaml for {plan.cell_id} is not valid YAML: {exc}") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "meta.yaml").write_text(meta_yaml, encoding="utf-8")
    (out_dir / "conda_build_config.yaml").write_text(variants, encoding="utf-8")
    for script in ("bld.bat", "build.sh"):
        shutil.copy2(RECIPE_DIR / script, out_dir / script)
    return RenderedRecipe(directory=out_dir, meta_yaml=meta_yaml, meta=meta)
