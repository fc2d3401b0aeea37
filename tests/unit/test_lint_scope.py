"""ruff and mypy look at every source folder of the package, also those named like the run's output folders
(torchbuild/stages/build/): pyproject's excludes name the root's build/ and channel/ only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _ruff_files(*paths: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", *paths], cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return {Path(line.strip()).resolve().relative_to(ROOT).as_posix() for line in proc.stdout.splitlines()
            if line.strip().endswith(".py")}  # fmt: skip


def test_ruff_checks_the_build_stage_package() -> None:
    files = _ruff_files(".")
    assert {"torchbuild/stages/build/stage.py", "torchbuild/stages/build/activate.py"} <= files


def test_ruff_leaves_out_only_the_root_output_folders(tmp_path: Path) -> None:
    # a project with this pyproject.toml, a build/ and channel/ at its root (a run's outputs) and a package folder
    # named build (as torchbuild/stages/build)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    for folder in ("build", "channel", "pkg/build", "pkg/channel"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "mod.py").write_text("x = 1\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", "."], cwd=tmp_path,
                          capture_output=True, text=True, check=True)  # fmt: skip
    shown = {Path(line.strip()).resolve().relative_to(tmp_path.resolve()).as_posix()
             for line in proc.stdout.splitlines() if line.strip().endswith(".py")}  # fmt: skip
    assert shown == {"pkg/build/mod.py", "pkg/channel/mod.py"}


def test_mypy_covers_the_build_stage_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "torchbuild" in config["tool"]["mypy"]["files"]
    assert "exclude" not in config["tool"]["mypy"]
