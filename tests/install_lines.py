"""Every install line a run or a publish prints, run as a user runs it, against a channel and a local stand-in for
PyPI that offers a NEWER torch and companion than the channel's (FIXTURE wheels ``torch-99.0``,
``<companion>-99.0``: pip takes the highest version across every index and find-links it reads, so a line that does
not pin the channel's exact versions installs the stand-in's).

- ``pip install ...``: run with ``--dry-run --report``, the stand-in given as a find-links folder, pip's own
  configuration left out (only the line's index and the stand-in are read); what pip would install, by project.
- ``conda install -c URL NAMES``: solved by py-rattler against URL (and the stored conda-forge repodata, where given,
  after it as conda's other channel); what the solve takes, by name."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.builders import make_wheel

ALONE = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}
NEWER = "99.0"


def pypi_stand_in(folder: Path, *projects: str) -> Path:
    """A find-links folder offering ``<project>-99.0`` of each of ``projects``: FIXTURE wheels (pure Python, any
    platform, requiring nothing), newer than anything a channel here publishes."""
    folder.mkdir(parents=True, exist_ok=True)
    for project in projects:
        module = project.replace("-", "_")
        files = {f"{module}/__init__.py": b"# a fixture: PyPI's stand-in\n"}
        make_wheel(folder, f"{module}-{NEWER}-py3-none-any.whl", files)
    return folder


def printed(output: str, command: str) -> list[str]:
    """The lines of ``output`` that are install commands (``pip install``, ``conda install``)."""
    return [line.strip() for line in output.splitlines() if line.strip().startswith(f"{command} install ")]


@dataclass(frozen=True)
class Taken:
    version: str
    source: str  # the URL pip downloads it from, or the channel rattler takes it from


def pip_takes(line: str, stand_in: Path, report: Path, *, no_deps: bool = False,
              target: tuple[str, ...] = ()) -> dict[str, Taken]:  # fmt: skip
    """What ``line`` (``pip install ...`` as printed) installs with the stand-in beside it, by project name."""
    words = shlex.split(line)
    assert words[:2] == ["pip", "install"], line
    argv = [sys.executable, "-m", "pip", "install", *words[2:], "--dry-run", "--ignore-installed", "--no-cache-dir",
            "--report", str(report), "--find-links", str(stand_in), *(["--no-deps"] if no_deps else []), *target]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, env=ALONE)  # fmt: skip
    assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    items = json.loads(report.read_text(encoding="utf-8"))["install"]
    return {i["metadata"]["name"]: Taken(i["metadata"]["version"], i["download_info"]["url"]) for i in items}


SOLVE = """
import asyncio, json, os, sys
from rattler import BuildString, GenericVirtualPackage, MatchSpec, PackageName, Version, solve

channels, specs, platform = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]

async def main():
    virtual = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
               for n, v in [("__unix", "0"), ("__linux", "6.1"), ("__glibc", "2.36")]]
    records = await solve(channels, [MatchSpec(s, strict=False) for s in specs], platforms=[platform, "noarch"],
                          virtual_packages=virtual)
    print(json.dumps({r.name.normalized: [str(r.version), str(r.build), str(r.channel)] for r in records}))

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # py-rattler can crash at interpreter exit (see torchbuild/conda/rattler_child.py)
"""


def conda_takes(line: str, *, also: tuple[str, ...] = (), platform: str = "linux-64",
                extra_specs: tuple[str, ...] = ()) -> dict[str, Taken]:  # fmt: skip
    """What ``line`` (``conda install -c URL NAMES`` as printed) takes, solved by py-rattler against its channel and
    ``also`` after it (conda's other channels), by package name; ``version`` is "<version> <build>"."""
    words = shlex.split(line)
    assert words[:3] == ["conda", "install", "-c"], line
    channels, specs = [words[3], *also], [*words[4:], *extra_specs]
    done = subprocess.run([sys.executable, "-c", SOLVE, json.dumps(channels), json.dumps(specs), platform],
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: Taken(f"{version} {build}", channel) for name, (version, build, channel) in found.items()}
