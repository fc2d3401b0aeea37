"""The smoke checks of a CUDA torch on a machine with a GPU: the same checks the smoke stages run in a fresh
environment (torchbuild/stages/smoke/resources/), against the torch installed in this Python, with the expectations
read from its installed metadata, not from torch itself:

- the version from the dist-info, the CUDA version from torch/version.py's text;
- the cuDNN X.Y.Z that its ``nvidia-cudnn-cuXX`` requirement pins (where it declares one);
- the shared libraries its ``nvidia-*`` requirements installed: each one the process loads must be the environment's.

    python bench/gpu_smoke.py [--out DIR]     # prints the check lines; DIR/gpu_smoke.json gets the results

PyPI's unlabelled CUDA wheel fails one check here by design: its dist-info says 2.11.0 where torch.__version__ says
2.11.0+cu130, which is why the pipeline relabels it (+cuXYZ) before anything else reads it.

Standard library only (a GPU machine's image has torch and little else). Exit 1 when a check failed, 2 when no CUDA
torch is installed here.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "torchbuild" / "stages" / "smoke" / "resources"
CUDA_LINE = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([0-9.]+)['\"]", re.MULTILINE)
VERSION_LINE = re.compile(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
CUDNN_PIN = re.compile(r"^nvidia-cudnn-cu\d+\s*==\s*(\d+)\.(\d+)\.(\d+)")
NVIDIA = re.compile(r"^nvidia-[a-z0-9-]+")


def expectations(dist: metadata.Distribution) -> list[str]:
    """The smoke_checks.py arguments this installed torch must meet."""
    version_py = dist.locate_file("torch/version.py")
    text = Path(str(version_py)).read_text(encoding="utf-8")
    match, version = CUDA_LINE.search(text), VERSION_LINE.search(text)
    if match is None:
        raise SystemExit(f"torch {dist.version} at {version_py} is a CPU build: this script checks a CUDA torch")
    # torch/version.py's __version__ carries the local label (2.11.0+cu130) that an index's dist-info may lack
    args = ["--expect-version", version.group(1) if version else dist.version, "--expect-cuda", match.group(1)]
    requirements = [r.split(";")[0].strip() for r in dist.requires or []]
    pins = [m for m in (CUDNN_PIN.match(r) for r in requirements) if m]
    if pins:
        major, minor, patch = pins[0].groups()
        args += ["--expect-cudnn", major, "--expect-cudnn-version", f"{major}.{minor}.{patch}"]
    # The CUDA libraries come from nvidia-* distributions, named in torch's requirements or (newer releases) through
    # cuda-toolkit's extras: every nvidia-* distribution installed here counts.
    everything = {d.metadata["Name"].lower() for d in metadata.distributions()}
    installed = {name for name in everything if NVIDIA.match(name)}
    names = installed | {m.group(0) for req in requirements if (m := NVIDIA.match(req))}
    libraries = sorted({Path(str(f)).name for name in names for f in _files(name) if ".so" in Path(str(f)).name})
    if libraries:
        args += ["--expect-from-environment", ",".join(libraries)]
    for companion in ("torchvision", "torchaudio"):  # their checks run where they are installed beside torch
        if companion in everything:
            args += [f"--expect-{companion}", metadata.version(companion).split("+")[0]]
    return args


def _files(name: str) -> list[object]:
    try:
        return list(metadata.distribution(name).files or [])
    except metadata.PackageNotFoundError:
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for gpu_smoke.json")
    args = parser.parse_args(argv)
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        print(f"no torch installed in {sys.executable}", file=sys.stderr)
        return 2
    try:
        expect = expectations(dist)
    except SystemExit as refused:
        print(refused, file=sys.stderr)
        return 2
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, errors="replace", check=False)
    nvidia_smi = listed.stdout.strip()
    print(f"python {platform.python_version()} ({sys.executable}); {nvidia_smi or 'nvidia-smi: no GPU listed'}")
    print("expect:", " ".join(expect))
    done = subprocess.run(
        [sys.executable, str(RESOURCES / "run_checks.py"), *expect],
        capture_output=True, text=True, errors="replace", check=False,
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if "check" in line]  # the first says the harness started
    for result in results:
        print(f"  {result['status']:8} {result['check']}: {result['message']}")
        if result["status"] == "failed":
            print("    " + result.get("output", "").replace("\n", "\n    "))
    if not results:
        print(done.stderr[-4000:])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {"python": sys.version, "gpus": nvidia_smi, "expect": expect, "results": results}
        (args.out / "gpu_smoke.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    failed = [r["check"] for r in results if r["status"] == "failed"]
    print(f"{len(results)} checks: {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
