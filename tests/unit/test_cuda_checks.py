"""The smoke's CUDA checks that need a GPU: 'cuda runtime' (NCCL against the installed nvidia-nccl, a device-side
assert surfacing), torch.compile's GPU part and torchvision's CUDA build. This host has no GPU and its torch is a CPU
build: the real runs are the CPU torch here (skips said), the linux CUDA 12.8 cell's real wheel without a GPU
(tests/integration/test_linux_cuda_cell.py: NCCL against nvidia-nccl-cu12) and bench/gpu_smoke.py on a lent H100
(docs/status.md, "Not done yet"). The decisions that only a GPU machine reaches are tested here against FAKES of torch's
attributes (types.SimpleNamespace), named so in each test: no CUDA torch with a GPU runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from torchbuild.stages.smoke.resources import checks_cuda, checks_vision
from torchbuild.stages.smoke.resources.smoke_base import CheckFailed

RESOURCES = Path(checks_cuda.__file__).parent


def _smoke(*args: str) -> dict[str, str]:
    torch = pytest.importorskip("torch", reason="skipped: no torch installed in this Python")
    argv = [sys.executable, str(RESOURCES / "run_checks.py"), "--expect-version", torch.__version__, *args,
            "--only", "cuda runtime"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_cpu_cell_skips_the_cuda_runtime_check_saying_so() -> None:
    result = _smoke("--expect-cuda", "cpu")
    assert (result["status"], result["message"]) == ("skipped", "skipped (CPU build)")


def test_a_cuda_cell_with_a_cpu_torch_is_left_to_the_import_check() -> None:
    result = _smoke("--expect-cuda", "12.8")
    assert result["status"] == "skipped"
    assert "is a CPU build; the import check compares it with the Plan" in result["message"]


def _nccl_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")


def _fake_torch(nccl: tuple[int, ...]) -> SimpleNamespace:
    """A FAKE torch whose torch.cuda.nccl.version() says ``nccl``."""
    return SimpleNamespace(cuda=SimpleNamespace(nccl=SimpleNamespace(version=lambda: nccl)))


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: NCCL is Linux-only")
@pytest.mark.parametrize(
    ("installed", "outcome"),
    [
        ("2.28.9", "NCCL 2.28.9 from nvidia-nccl-cu13 2.28.9"),
        ("2.27.3", "torch reports NCCL 2.28.9, but the environment's nvidia-nccl-cu13 is 2.27.3"),
        ("2.28.90", "torch reports NCCL 2.28.9, but the environment's nvidia-nccl-cu13 is 2.28.90"),
        (None, "NCCL 2.28.9 (no nvidia-nccl distribution in this environment to compare)"),
    ],
)
def test_nccl_is_the_installed_distribution_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: str | None, outcome: str
) -> None:
    if installed:
        _nccl_dist(tmp_path, "nvidia-nccl-cu13", installed)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])  # the distributions importlib.metadata sees: only these
    fake = _fake_torch((2, 28, 9))
    if outcome.startswith("torch reports"):
        with pytest.raises(CheckFailed, match=outcome.replace(".", r"\.")):
            checks_cuda.nccl_state(fake)
    else:
        assert checks_cuda.nccl_state(fake) == outcome


def _fake_cuda_torch(raised: Exception | None) -> SimpleNamespace:
    """A FAKE torch whose _assert_async raises ``raised`` (None: nothing, as a build that loses CUDA errors)."""

    def assert_async(tensor: object) -> None:
        if raised is not None:
            raise raised

    return SimpleNamespace(_assert_async=assert_async, tensor=lambda value, device: value,
                           cuda=SimpleNamespace(synchronize=lambda: None), __version__="2.11.0+cu130")  # fmt: skip


def test_a_device_side_assert_must_surface_naming_cuda() -> None:
    said = checks_cuda.device_assert_state(
        _fake_cuda_torch(RuntimeError("CUDA error: device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA"))
    )
    assert said == "a device-side assert surfaced as RuntimeError: CUDA error: device-side assert triggered"
    with pytest.raises(CheckFailed, match="raised nothing: CUDA errors are lost"):
        checks_cuda.device_assert_state(_fake_cuda_torch(None))
    with pytest.raises(CheckFailed, match="does not name CUDA: something else"):
        checks_cuda.device_assert_state(_fake_cuda_torch(RuntimeError("something else")))


def _fake_vision_torch(torch_cuda: str | None, built: int) -> SimpleNamespace:
    """A FAKE torch with torchvision's ops registered, built for CUDA_VERSION ``built`` (-1: no CUDA)."""
    ops = SimpleNamespace(torchvision=SimpleNamespace(_cuda_version=lambda: built))
    return SimpleNamespace(version=SimpleNamespace(cuda=torch_cuda), ops=ops)


@pytest.mark.parametrize(
    ("torch_cuda", "built", "said"),
    [
        ("13.0", 13000, "for CUDA 13.0 as torch"),
        ("12.8", 12080, "for CUDA 12.8 as torch"),
        ("9.2", 9020, "for CUDA 9.2 as torch"),
        ("12.8", 12060, "built for CUDA 12.6, torch for CUDA 12.8"),
        ("12.8", -1, "built for no CUDA (a CPU build) beside torch's CUDA 12.8"),
        (None, -1, ""),
    ],
)
def test_torchvision_s_operators_are_built_for_torch_s_cuda(torch_cuda: str | None, built: int, said: str) -> None:
    assert checks_vision._built_for_cuda(_fake_vision_torch(torch_cuda, built)) == said
