"""linux-64: gcc range that nvcc accepts, and the Linux build environment."""

from __future__ import annotations

from torchbuild.platforms.target import Target, Toolchain, cpython_abi_tag


class Linux:
    name = "linux-64"

    def site_packages(self, python: str) -> str:
        return f"lib/python{python}/site-packages"

    def python_abi_tag(self, python: str) -> str:
        return cpython_abi_tag(python)

    def toolchain(self, target: Target) -> Toolchain:
        cuda = target.cuda
        return Toolchain(
            compiler="gcc",
            generator="Ninja",
            nvcc=cuda.version if cuda else None,
            gcc_accepted=str(cuda.gcc) if cuda else None,
            nvtx=cuda.nvtx if cuda else None,
        )

    def build_env(self, target: Target, toolchain: Toolchain) -> dict[str, str]:
        env = {"CMAKE_GENERATOR": toolchain.generator}
        if target.cuda is not None:
            env["CUDA_HOME"] = f"/usr/local/cuda-{target.cuda.version}"
        return env
