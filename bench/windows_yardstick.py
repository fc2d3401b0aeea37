"""The win-64 yardstick that executes what it ships, as the pipeline's smoke does: the least a Windows user does by
hand with the wheels a cell ships, under the same Wine as the pipeline's smoke.

1. `delvewheel repair` of each wheel (with the DLL providers the repair stage finds; a companion's excluding what
   torch's repaired wheel holds), one after the other;
2. a fresh venv of python.org's CPython for Windows (`uv venv`, the embeddable CPython laid out as its installer
   lays it out: scripts/wine_host.py's installed_copy), under Wine;
3. `pip install` of the repaired wheels into it, their dependencies from the configured indexes (numpy<=2.0.2: Wine
   8.0's ucrtbase lacks crealf, which numpy >= 2.1 imports; the pipeline's smoke pins the same, smoke_envs.yaml);
4. one script under Wine that does what upstream's Windows smoke test does at the least (SCRIPT): import torch, a
   matmul, a DataLoader with 2 spawned workers, torchvision's nms where torchvision is shipped, torchaudio's import
   where torchaudio is.

Each part's seconds are kept apart (`measure`); bench/main_job.py prints them beside the pipeline's.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import wine_host  # noqa: E402

from torchbuild.platforms.windows import wine  # noqa: E402

WINE_ENV = {"KMP_AFFINITY": "disabled"}  # as the pipeline's smoke under Wine 8.0 (stages/smoke/wine.py)
TIMEOUT_S = 1800.0
SCRIPT = '''\
"""What upstream's Windows smoke test does, at the least (bench/windows_yardstick.py)."""
import importlib.util

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    a = torch.rand(64, 64, dtype=torch.float64)
    assert torch.allclose(a @ torch.eye(64, dtype=torch.float64), a)
    loader = DataLoader(TensorDataset(torch.arange(32)), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert sorted(int(x) for (batch,) in loader for x in batch) == list(range(32))
    said = [torch.__version__]
    if importlib.util.find_spec("torchvision"):
        import torchvision
        boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [50.0, 50.0, 60.0, 60.0]])
        assert torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist() == [0, 2]
        said.append(torchvision.__version__)
    if importlib.util.find_spec("torchaudio"):
        import torchaudio
        said.append(torchaudio.__version__)
    print("ok", *said)


if __name__ == "__main__":
    main()
'''


def _timed(session: wine.Session, argv: list[str | Path], cwd: Path, what: str) -> float:
    started = time.perf_counter()
    ran = session.run(argv, timeout=TIMEOUT_S, cwd=cwd)
    if ran.returncode != 0:
        shown = ran.stdout[-3000:] + wine.without_noise(ran.stderr)[-3000:]
        raise SystemExit(f"the yardstick's {what} failed under Wine (exit {ran.returncode}):\n{shown}")
    return time.perf_counter() - started


def measure(repaired: list[Path], delvewheel_s: float, cache_dir: Path) -> dict[str, float]:
    """The seconds of each part, the repair's (``delvewheel_s``, measured by the caller on the same wheels) first;
    ``repaired``: the wheels delvewheel made, torch's first."""
    found = wine.find()
    if found is None:
        raise SystemExit("the win-64 yardstick needs Wine (apt-get install wine64)")
    parts = {"delvewheel repair": delvewheel_s}
    with tempfile.TemporaryDirectory(prefix="yardstick-") as tmp:
        work = Path(tmp)
        python = wine_host.installed_copy(wine_host.prepare("3.11", cache_dir), work / "Python311")
        venv = work / "venv"
        script = work / "smoke.py"
        script.write_text(SCRIPT, encoding="utf-8")
        prefix = wine.fresh_prefix(found, cache_dir, work / "prefix")
        with wine.Session(found, prefix, WINE_ENV) as session:  # its start is not timed, nor is the pipeline's smoke's
            parts["fresh venv (uv venv)"] = _timed(
                session, [python, "-m", "uv", "venv", "--python", wine.windows_path(python), wine.windows_path(venv)],
                work, "venv",
            )  # fmt: skip
            wheels = [wine.windows_path(w) for w in repaired]
            parts["pip install"] = _timed(
                session, [python, "-m", "pip", "--python", wine.windows_path(venv / "Scripts" / "python.exe"),
                          "install", "--quiet", "--disable-pip-version-check", *wheels, "numpy<=2.0.2"],
                work, "pip install",
            )  # fmt: skip
            cwd = work / "empty"
            cwd.mkdir()
            parts["smoke script"] = _timed(
                session, [venv / "Scripts" / "python.exe", wine.windows_path(script)], cwd, "smoke script"
            )
    return parts

