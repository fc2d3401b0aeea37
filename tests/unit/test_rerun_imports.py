"""A rerun with nothing changed loads none of the heavy libraries only a real stage needs (issue 45: importing them
was most of a rerun's time). Checked by what a fresh interpreter has in sys.modules, not by timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchbuild.channels.local_layout import remove_leftovers
from torchbuild.platforms.linux import auditwheel_api, manylinux

ROOT = Path(__file__).resolve().parents[2]
# Libraries a rerun does not use: each costs 10 to 90 ms to import (pyelftools with auditwheel, py-rattler, ...).
HEAVY = (
    "auditwheel", "boto3", "conda_package_streaming", "cyclonedx", "delvewheel", "elftools", "email.parser",
    "importlib.metadata", "installer", "jinja2", "pefile", "rattler", "rattler_build", "urllib.request", "zstandard",
)  # fmt: skip
# What a rerun loads and does outside the stages (which it skips): the command line and the runner, the cell's Plan
# (its wheel tags included) and the publish stage's sweep of a channel for a killed writer's leftovers.
RERUN = """
import json, sys
from pathlib import Path
import torchbuild.commands.cli, torchbuild.run.runner
from torchbuild.channels.local_layout import remove_leftovers
from torchbuild.config.matrix import Cell, Matrix
from torchbuild.plan.resolution import resolve
plan = resolve(Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0"), Matrix())
remove_leftovers(Path(sys.argv[1]))
print(json.dumps({"tags": plan.wheel_tags.accepted_platforms, "heavy": [m for m in sys.argv[2:] if m in sys.modules]}))
"""


def _rerun(channel: Path, cache: Path) -> dict[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", RERUN, str(channel), *HEAVY], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, list[str]] = json.loads(done.stdout.splitlines()[-1])
    return result


def _channel(tmp_path: Path) -> Path:
    channel = tmp_path / "channel"
    for folder in ("linux-64", "noarch", "whl/simple/torch"):
        (channel / folder).mkdir(parents=True)
    return channel


def test_a_rerun_loads_no_heavy_library(tmp_path: Path) -> None:
    channel = _channel(tmp_path)
    first = _rerun(channel, tmp_path / "cache")  # asks auditwheel once for the wheel tags, and keeps the answer
    again = _rerun(channel, tmp_path / "cache")
    assert again["heavy"] == []
    assert again["tags"] == first["tags"]
    assert again["tags"][0] == "manylinux_2_28_x86_64" and again["tags"][-1] == "linux_x86_64"


def test_kept_wheel_tags_are_auditwheels_and_a_damaged_entry_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = "manylinux_2_17_x86_64"
    asked = manylinux.accepted_platform_tags(target)
    assert asked == manylinux._from_policies(target)
    assert "manylinux2014_x86_64" in asked  # the legacy alias, from auditwheel's policy data
    (kept,) = (tmp_path / "torchbuild" / "platform-tags").iterdir()
    assert kept.name.startswith(f"{target}-") and json.loads(kept.read_text()) == list(asked)
    kept.write_text('["manylinux_2_17_x86_64"')  # cut short
    assert manylinux.accepted_platform_tags(target) == asked
    assert json.loads(kept.read_text()) == list(asked)
    # Other auditwheel policy files (here: fewer of them read) are another key: auditwheel is asked again.
    monkeypatch.setattr(auditwheel_api, "POLICY_SOURCES", auditwheel_api.POLICY_SOURCES[1:])
    assert manylinux.accepted_platform_tags(target) == asked
    assert len(list(kept.parent.iterdir())) == 2


def test_leftovers_are_swept_from_the_subdirs_only(tmp_path: Path) -> None:
    channel = _channel(tmp_path)
    (channel / "notes").mkdir()
    part = ".pytorch-2.13.0-py3.11_cpu_0.conda.0123456789ab.part"
    for folder in ("linux-64", "noarch", "notes", "whl/simple/torch", "."):
        (channel / folder / part).write_bytes(b"half")
    remove_leftovers(channel)
    left = sorted(p.relative_to(channel).as_posix() for p in channel.rglob("*.part"))
    assert left == [f"notes/{part}"]  # not a conda subdir: not the channel's to sweep
