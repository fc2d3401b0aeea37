"""The recipe rendered for CPU and CUDA cells on each platform, as conda-build and as our assembler see it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.test_plan import plan_of
from torchbuild.errors import UserError
from torchbuild.stages.conda.recipe import apply_selectors, evaluate_selector, render

CELLS = [
    ("win-64", "cpu", "3.11", "2.5.1"),
    ("win-64", "12.4", "3.11", "2.5.1"),
    ("linux-64", "cpu", "3.11", "2.13.0"),
    ("linux-64", "12.4", "3.12", "2.5.1"),
]


@pytest.mark.parametrize("cell", CELLS, ids=["-".join(c) for c in CELLS])
def test_rendered_recipe(cell: tuple[str, str, str, str], tmp_path: Path) -> None:
    plan = plan_of(*cell)
    rendered = render(plan, tmp_path / "recipe", wheel_requires=["filelock", "sympy >=1.13.3"])
    meta = rendered.meta
    assert meta["package"] == {"name": "pytorch", "version": plan.torch}
    assert meta["build"]["string"] == plan.root.conda.build_string
    assert meta["build"]["number"] == plan.root.conda.build_number
    wheel = f"TORCHBUILD_WHEEL={plan.stage_dirs['repair']}/{plan.root.wheel}"
    assert meta["build"]["script_env"] == [wheel, "TORCHBUILD_ROOT"]
    run = meta["requirements"]["run"]
    # Before a wheel is read, the VC runtime dependency is the data's minimum (the conda stage raises it to the floor).
    vc = ["vc14_runtime >=14.29"] if plan.platform == "win-64" else []
    assert run == [*plan.root.conda.depends, "filelock", "sympy >=1.13.3", *vc]
    assert meta["requirements"]["host"] == [f"python {plan.python}", "pip"]
    whitelist = meta["build"]["missing_dso_whitelist"]
    commands = meta["test"]["commands"]
    if plan.platform == "win-64":
        assert whitelist == ["*/nvcuda.dll", "*/nvml.dll"]
        assert any("vc14_runtime" in d for d in run)
    else:
        assert whitelist == ["*/libcuda.so*", "*/libnvidia-ml.so*"]
        assert "_openmp_mutex >=4.5" in run
    if plan.is_cuda:
        assert meta["requirements"]["run_constrained"] == ["cpuonly <0a0"]
        assert any(f"torch.version.cuda == '{plan.cuda}'" in c for c in commands)
        assert "cuda-version" in " ".join(run)
    else:
        assert "run_constrained" not in meta["requirements"]
        assert any("torch.version.cuda is None" in c for c in commands)
    assert meta["extra"]["torchbuild"]["cell"] == plan.cell_id

    # The conda-build form keeps its selectors, and the variant config is rendered from the same Plan.
    files = sorted(p.name for p in rendered.directory.iterdir())
    assert files == ["bld.bat", "build.sh", "conda_build_config.yaml", "meta.yaml"]
    text = (rendered.directory / "meta.yaml").read_text()
    assert '"*/nvcuda.dll"  # [win]' in text
    assert "skip: true  # [win32 or linux32]" in text
    variants = yaml.safe_load((rendered.directory / "conda_build_config.yaml").read_text())
    assert variants["python"] == [plan.python]
    assert variants["target_platform"] == [plan.platform]
    assert variants["cuda_compiler_version"] == ([plan.cuda] if plan.is_cuda else ["None"])
    if plan.platform == "win-64":
        assert variants["c_compiler"] == [f"vs{plan.toolchain.visual_studio}"]


def test_selectors_follow_conda_build() -> None:
    ns = {"win": True, "linux": False, "py": 311, "cuda_compiler_version": "12.4"}
    assert evaluate_selector("win and py>=38", ns)
    assert not evaluate_selector("linux or py<36", ns)
    assert evaluate_selector('cuda_compiler_version != "None"', ns)
    assert apply_selectors("a: 1  # [win]\nb: 2  # [linux]\nc: 3\n", ns) == "a: 1\nc: 3\n"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("__import__('os')", "uses Call"),
        ("osx_arm", "names 'osx_arm'"),
        ("win and", "not a valid expression"),
    ],
)
def test_bad_selectors_are_refused(expr: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        evaluate_selector(expr, {"win": True})
