"""Installs a cell's CUDA toolkit on a CI runner, as torchbuild/data/ci_cuda.yaml says (the nightly's build job).

    python scripts/install_cuda.py --cuda 12.8 --platform win-64            # install, then export to the job
    python scripts/install_cuda.py --cuda 12.8 --platform win-64 --dry-run  # print what it would do

win-64: NVIDIA's network installer, silent, with the component list of the data. linux-64: NVIDIA's apt repository.
Afterwards nvcc must exist in the install directory; CUDA_PATH, CUDA_PATH_V<X>_<Y> (win-64) or CUDA_HOME
(linux-64) go to $GITHUB_ENV and the bin directory to $GITHUB_PATH, so the pipeline's later steps find them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import yaml

DATA = "ci_cuda.yaml"
TABLE = Path(__file__).resolve().parent.parent / "torchbuild" / "data" / DATA


class Invalid(Exception):
    pass


@dataclass(frozen=True)
class Install:
    downloads: tuple[tuple[str, str], ...]  # (url, file name in the temp dir)
    commands: tuple[tuple[str, ...], ...]  # {tmp} stands for the temp dir
    nvcc: str
    env: Mapping[str, str]
    path: str  # the bin directory for $GITHUB_PATH
    note: str = ""


def load_table(path: Path = TABLE) -> dict[str, Any]:
    table: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return table


def plan(cuda: str, platform: str, table: Mapping[str, Any]) -> Install:
    if platform == "win-64":
        windows = table["windows"]
        entry = windows["releases"].get(cuda)
        if entry is None:
            raise Invalid(f"{DATA}: no win-64 installer for CUDA {cuda}; it has {', '.join(windows['releases'])}")
        url = windows["url"].format(release=entry["release"])
        exe = url.rsplit("/", 1)[1]
        components = entry["components"]
        selected = [] if components == "all" else [f"{c}_{cuda}" for c in components]
        root = PureWindowsPath(windows["install_dir"].format(cuda=cuda))
        return Install(
            downloads=((url, exe),),
            commands=((f"{{tmp}}/{exe}", "-s", *selected),),
            nvcc=str(root / "bin" / "nvcc.exe"),
            env={"CUDA_PATH": str(root), f"CUDA_PATH_V{cuda.replace('.', '_')}": str(root)},
            path=str(root / "bin"),
            note=str(entry.get("uncertain", "")),
        )
    if platform == "linux-64":
        linux = table["linux"]
        if cuda not in linux["releases"]:
            raise Invalid(f"{DATA}: no linux-64 packages for CUDA {cuda}; it has {', '.join(linux['releases'])}")
        keyring = linux["keyring"].rsplit("/", 1)[1]
        packages = [f"{p}-{cuda.replace('.', '-')}" for p in linux["packages"]]
        home = PurePosixPath(linux["install_dir"].format(cuda=cuda))
        return Install(
            downloads=((linux["keyring"], keyring),),
            commands=(
                ("sudo", "dpkg", "-i", f"{{tmp}}/{keyring}"),
                ("sudo", "apt-get", "update", "-q"),
                ("sudo", "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages),
            ),
            nvcc=str(home / "bin" / "nvcc"),
            env={"CUDA_HOME": str(home)},
            path=str(home / "bin"),
        )
    raise Invalid(f"no CUDA installation for platform {platform}: win-64 or linux-64")


def describe(install: Install) -> str:
    lines = [f"download {url}" for url, _ in install.downloads]
    lines += [" ".join(command) for command in install.commands]
    lines += [f"check {install.nvcc}"]
    lines += [f"$GITHUB_ENV {k}={v}" for k, v in install.env.items()] + [f"$GITHUB_PATH {install.path}"]
    if install.note:
        lines.append(f"note: {install.note}")
    return "\n".join(lines)


def apply(install: Install, environ: Mapping[str, str]) -> None:
    with tempfile.TemporaryDirectory(dir=environ.get("RUNNER_TEMP")) as tmp:
        for url, name in install.downloads:
            print(f"download {url}", flush=True)
            with urllib.request.urlopen(url, timeout=600) as response, open(Path(tmp) / name, "wb") as out:
                shutil.copyfileobj(response, out)
        for command in install.commands:
            argv = [part.replace("{tmp}", tmp) for part in command]
            print(" ".join(argv), flush=True)
            subprocess.run(argv, check=True)
    if not Path(install.nvcc).is_file():
        raise Invalid(f"{install.nvcc}: not there after the installation; see the installer's output above")
    exports = {"GITHUB_ENV": [f"{k}={v}" for k, v in install.env.items()], "GITHUB_PATH": [install.path]}
    for variable, lines in exports.items():
        target = environ.get(variable)
        if target:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", required=True, help="X.Y, as in matrix.yaml")
    parser.add_argument("--platform", required=True, help="win-64 or linux-64")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done; change nothing")
    args = parser.parse_args(argv)
    try:
        install = plan(args.cuda, args.platform, load_table())
        if args.dry_run:
            print(describe(install))
            return 0
        apply(install, os.environ)
    except Invalid as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"error: installing CUDA {args.cuda} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
