"""linux-64: gcc range that nvcc accepts, the Linux build environment, and what the later stages do with ELF."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torchbuild.platforms.linux import elf
from torchbuild.platforms.target import LibraryUnreadable, RepairTool, SmokeBackend, Target, Toolchain, cpython_abi_tag


class Linux:
    name = "linux-64"
    repair_tool: RepairTool = "auditwheel"
    conda_windows_layout = False

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

    def compiles_on(self, host: str) -> bool:
        return host == self.name

    def expand_env(self, value: str, env: Mapping[str, str]) -> str:
        return value

    def library_imports(self, path: Path, member: str) -> tuple[str, ...]:
        try:
            return elf.read_elf(path, member).needed
        except (OSError, elf.elf_error()) as exc:
            raise LibraryUnreadable(str(exc)) from None

    def smoke_backend(self, host: str) -> SmokeBackend | None:
        return "venv" if host == self.name else None
