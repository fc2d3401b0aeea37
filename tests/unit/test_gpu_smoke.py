"""bench/gpu_smoke.py: the expectations it reads from an installed torch (a real dist-info and torch/version.py
written in a temporary site folder) and its refusal of a CPU torch, as run by a user."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gpu_smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "bench" / "gpu_smoke.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install(site: Path, name: str, version: str, requires: list[str], files: dict[str, str]) -> None:
    info = site / f"{name.replace('-', '_')}-{version.split('+')[0]}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("Metadata-Version: 2.1\n" + "\n".join(lines) + "\n", encoding="utf-8")
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text, encoding="utf-8")
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in files), encoding="utf-8")


def test_expectations_come_from_the_installed_metadata_not_from_torch(tmp_path, monkeypatch):
    _install(tmp_path, "torch", "2.11.0", ["nvidia-cudnn-cu13==9.19.0.56; platform_system == 'Linux'", "filelock"],
             {"torch/version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n"})
    _install(tmp_path, "nvidia-cudnn-cu13", "9.19.0.56", [], {"nvidia/cudnn/lib/libcudnn.so.9": ""})
    monkeypatch.syspath_prepend(str(tmp_path))
    dist = next(d for d in metadata.distributions(path=[str(tmp_path)]) if d.metadata["Name"] == "torch")
    args = _gpu_smoke().expectations(dist)
    assert args[:4] == ["--expect-version", "2.11.0+cu130", "--expect-cuda", "13.0"]
    assert args[4:8] == ["--expect-cudnn", "9", "--expect-cudnn-version", "9.19.0"]
    assert "libcudnn.so.9" in args[args.index("--expect-from-environment") + 1].split(",")


def test_a_cpu_torch_is_refused_with_the_reason(tmp_path):
    _install(tmp_path, "torch", "2.13.0+cpu", [], {"torch/version.py": "__version__ = '2.13.0+cpu'\ncuda = None\n"})
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_smoke.py")], capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"},
    )
    assert done.returncode == 2
    assert "is a CPU build: this script checks a CUDA torch" in done.stderr
    assert "Traceback" not in done.stderr
