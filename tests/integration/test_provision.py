"""CUDA provisioning from the package index: a 13.x release other than this machine's 13.0, made into a toolkit
root from the nvidia-cuda-* wheels, compiles a real kernel (and the fixture project through the build stage)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from torchbuild.platforms import provision
from torchbuild.platforms.cuda import nvcc_version
from torchbuild.platforms.toolchain import ToolchainError

PROVISIONED = "13.2"  # not the 13.0 installed here
KERNEL = """\
#include <cstdio>
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
int main() {
  float* d = nullptr;
  cudaError_t err = cudaMalloc(&d, 4 * sizeof(float));
  if (err == cudaSuccess) { twice<<<1, 4>>>(d); err = cudaDeviceSynchronize(); }
  std::printf("%s\\n", cudaGetErrorString(err));
  return 0;
}
"""


def provisioned_toolkit(request: pytest.FixtureRequest) -> Path:
    """The CUDA 13.2 toolkit root, provisioned once into pytest's cache folder (kept between runs: ~115 MB of
    wheels are downloaded only the first time)."""
    cache = Path(request.config.cache.mkdir("torchbuild-provision"))
    try:
        return provision.provision(PROVISIONED, "linux-64", cache, cache / "provision.log")
    except ToolchainError as exc:
        pytest.skip(f"skipped: the package index cannot serve CUDA {PROVISIONED} wheels here ({exc})")


@pytest.mark.slow
def test_provisioned_nvcc_compiles_a_kernel(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = provisioned_toolkit(request)
    nvcc = root / "bin" / "nvcc"
    version = nvcc_version(nvcc)
    assert version.release == PROVISIONED and version.full.startswith(PROVISIONED + ".")
    manifest = provision.manifest(Path(request.config.cache.mkdir("torchbuild-provision")), PROVISIONED, "linux-64")
    assert {re.sub(r"-\d.*", "", w) for w in manifest["wheels"]} >= {
        "nvidia_cuda_nvcc", "nvidia_cuda_runtime", "nvidia_cuda_crt", "nvidia_nvvm", "nvidia_cuda_cccl"}
    assert all(w.split("-")[1].startswith(PROVISIONED + ".") for w in manifest["wheels"])
    (tmp_path / "twice.cu").write_text(KERNEL)
    exe = tmp_path / "twice"
    subprocess.run([str(nvcc), "-gencode", "arch=compute_80,code=sm_80", "twice.cu", "-o", str(exe)],
                   cwd=tmp_path, check=True, capture_output=True, text=True)
    listing = subprocess.run([str(root / "bin" / "cuobjdump"), "--list-elf", str(exe)], capture_output=True,
                             text=True, check=True).stdout
    assert set(re.findall(r"\.(sm_\d+)\.cubin", listing)) == {"sm_80"}  # static cudart adds its own sm_80 ELF
    ran = subprocess.run([str(exe)], capture_output=True, text=True, check=False).stdout.strip()
    if shutil.which("nvidia-smi") is None:
        assert ran != "no error"
        pytest.skip(f"skipped: no GPU here; the provisioned build runs and the runtime reports {ran!r}")
    assert ran == "no error"


@pytest.mark.slow
def test_build_stage_provisions_the_cells_cuda(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A cell of CUDA 13.2, which is not installed: the build stage's activation takes the provisioned root."""
    from tests.integration.test_build import ARCHS, build_fixture, cell_plan, device_code, unpack

    root = provisioned_toolkit(request)
    cache = Path(request.config.cache.mkdir("torchbuild-provision"))
    plan = cell_plan(PROVISIONED)
    assert not Path(plan.env["CUDA_HOME"]).exists()  # /usr/local/cuda-13.2 is not on this machine
    src = Path(shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext", tmp_path / "src"))
    result, log = build_fixture(plan, src, tmp_path / "work", cache)
    site = unpack(result.outputs["built_wheel"].path, tmp_path / "site")
    seen = json.loads((site / "fixture_ext" / "_build_env.json").read_text())
    assert seen["CUDA_HOME"] == str(root) and seen["TORCH_CUDA_ARCH_LIST"] == ARCHS
    assert f"nvcc {PROVISIONED}: {PROVISIONED}." in log.read_text()
    library = next((site / "fixture_ext").glob("_ext*.so"))
    assert device_code(root / "bin" / "cuobjdump", library) == ({"sm_75", "sm_86"}, {"sm_86"})
    assert dataclasses.asdict(plan)["cuda"] == PROVISIONED


def test_cuda_12_cannot_be_provisioned(tmp_path: Path) -> None:
    assert provision.recipe("12.4", "linux-64") is None
    with pytest.raises(ToolchainError) as err:
        provision.provision("12.4", "linux-64", tmp_path)
    message = str(err.value)
    assert "hold only ptxas, not nvcc" in message and "/usr/local/cuda-12.4" in message and "CUDA_PATH_V12_4" in message
    assert not (tmp_path / "cuda").exists()
