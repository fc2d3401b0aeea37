"""The FIXTURE companion ``visionfixture`` (tests/fixtures/companion_ext: shaped like torchvision, not torchvision):
its checkout made a git repository, and a copy of companions.yaml that names it (``TORCHBUILD_DATA``), so that a
cell compiles it from that checkout against its own torch, as it would a torchvision checkout.

The data entry is what a user adds for a package of their own: its repository, no PyPI wheel (``built_on: []``: it
is only ever compiled), the variables its setup.py reads (``checkout``), and no release that pairs with any torch."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT
from torchbuild.knowledge import companions, datafiles

NAME = "visionfixture"
SOURCE = ROOT / "tests" / "fixtures" / "companion_ext"
# The op its matrix.yaml test_command runs in both smoke environments: the user's check of what it does
CHECK = (
    "import torch, visionfixture\n"
    "got = visionfixture.scaled_add(torch.ones(3), torch.arange(3.0), 2.0).tolist()\n"
    "assert got == [1.0, 3.0, 5.0], got\n"
    "print('visionfixture', visionfixture.__version__, 'scaled_add', got, 'torch', torch.__version__)\n"
)
GIT = {"GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid", "GIT_COMMITTER_NAME": "fixture",
       "GIT_COMMITTER_EMAIL": "fixture@example.invalid", "GIT_AUTHOR_DATE": "2023-11-14T22:13:20Z",
       "GIT_COMMITTER_DATE": "2023-11-14T22:13:20Z"}  # fmt: skip


def checkout(dest: Path) -> tuple[Path, str]:
    """A git repository of the fixture at ``dest`` (one commit, made in the test); its HEAD."""
    shutil.copytree(SOURCE, dest, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "version.py"))
    env = {**os.environ, **GIT}
    for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "fixture"]):
        subprocess.run(["git", "-C", str(dest), *argv], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return dest, head.stdout.strip()


def data(folder: Path) -> Path:
    """A copy of the installed companions.yaml with the fixture added as data alone (``TORCHBUILD_DATA``)."""
    raw = datafiles.raw(companions.DATA_FILE)
    entry = {"repository": "https://github.com/example/visionfixture", "built_on": [],
             "checkout": {"version_env": "BUILD_VERSION", "torch_env": "PYTORCH_VERSION"}}  # fmt: skip
    raw = {**raw, "packages": {**raw["packages"], NAME: entry}}
    raw["pairs"] = {torch: {**row, NAME: {"none": "a fixture: compiled from its checkout only"}}
                    for torch, row in raw["pairs"].items()}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / companions.DATA_FILE).write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return folder


def matrix(folder: Path) -> Path:
    """The repository's matrix.yaml with the fixture's op checked by ``test_command`` (in both smoke environments)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "check_visionfixture.py").write_text(CHECK, encoding="utf-8")
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    (folder / "matrix.yaml").write_text(text + '\ntest_command: "python {project}/check_visionfixture.py"\n',
                                        encoding="utf-8")  # fmt: skip
    return folder / "matrix.yaml"
