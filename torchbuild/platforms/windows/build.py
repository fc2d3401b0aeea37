"""win-64: MSVC toolset choice (nvcc refuses newer MSVC), generators, the Windows build environment, and what the
later stages do with PE (delvewheel, conda's Windows layout, Wine on a Linux host).

Only resolution lives here; finding Visual Studio with vswhere and running vcvarsall.bat happen in the build
stage, at the edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.host import downloads
from torchbuild.knowledge.compat import CPU, Range, version_key
from torchbuild.platforms.target import LibraryUnreadable, RepairTool, SmokeBackend, Target, Toolchain, cpython_abi_tag
from torchbuild.platforms.windows import pe

# With Ninja and CUDA 8, PyTorch's build ran this first so nvcc found the VS2015 compiler (source document 000).
VS2015_PREBUILD = r"%VS140COMNTOOLS%\..\..\VC\vcvarsall.bat"


class Windows:
    name = "win-64"
    repair_tool: RepairTool = "delvewheel"
    conda_windows_layout = True

    def compiles_on(self, host: str) -> bool:
        return host == self.name

    def expand_env(self, value: str, env: Mapping[str, str]) -> str:
        return downloads.expand(value, env)

    def library_imports(self, path: Path, member: str) -> tuple[str, ...]:
        try:
            info = pe.read_pe(path.read_bytes(), member)
        except (OSError, pe.PeError) as exc:
            raise LibraryUnreadable(str(exc)) from None
        return (*info.imports, *info.delay_imports)

    def smoke_backend(self, host: str) -> SmokeBackend | None:
        """On a Linux host its artifacts run under Wine."""
        if host == self.name:
            return "venv"
        return "wine" if host == "linux-64" else None

    def site_packages(self, python: str) -> str:
        return "Lib/site-packages"

    def python_abi_tag(self, python: str) -> str:
        return cpython_abi_tag(python)

    def accepted_toolsets(self, target: Target) -> Range:
        """What nvcc accepts; a CPU cell follows the newest CUDA of its release, as upstream's builds did."""
        if target.cuda is not None:
            return target.cuda.msvc
        shipped = [c for c in target.release.platforms[self.name].cuda if c != CPU and c in target.compat.cuda]
        if shipped:
            return target.compat.cuda[max(shipped, key=version_key)].msvc
        known = target.compat.toolsets()
        return Range(min=known[0], max=known[-1])

    def toolchain(self, target: Target) -> Toolchain:
        compat = target.compat
        accepted = self.accepted_toolsets(target)
        known = compat.toolsets()
        requested = target.options.msvc_toolset
        if requested == "auto":
            candidates = [t for t in known if t in accepted]
            if not candidates:
                raise UserError(f"No known MSVC toolset is in the range {accepted} that this cell needs.")
            toolset = candidates[-1]
        else:
            if requested not in known:
                ranges = ", ".join(f"{vs.toolsets} (VS {vs.year})" for vs in compat.visual_studio)
                raise UserError(f"Unknown MSVC toolset '{requested}'. Known toolsets: {ranges}.")
            if requested not in accepted:
                who = f"nvcc from CUDA {target.cuda.version}" if target.cuda else "this CPU cell's toolchain"
                years = sorted({compat.visual_studio_for_toolset(t).year for t in known if t in accepted})
                raise UserError(
                    f"{who} refuses MSVC {requested}: it accepts MSVC {accepted} "
                    f"(Visual Studio {', '.join(map(str, years))}). "
                    f"Pin one of those with build.msvc_toolset in matrix.yaml or --msvc."
                )
            toolset = requested
        vs = compat.visual_studio_for_toolset(toolset)
        generator = "Ninja" if target.options.generator == "ninja" else vs.generator
        return Toolchain(
            compiler="msvc",
            generator=generator,
            nvcc=target.cuda.version if target.cuda else None,
            msvc_toolset=toolset,
            msvc_accepted=str(accepted),
            visual_studio=vs.year,
            vcvarsall_args=("x64", f"-vcvars_ver={toolset}"),
            nvtx=target.cuda.nvtx if target.cuda else None,
            visual_studio_toolsets=str(vs.toolsets),
            known_bad=compat.known_bad,
            msvc_table="; ".join(f"CUDA {v}: MSVC {compat.cuda[v].msvc}" for v in compat.cuda_versions()),
        )

    def build_env(self, target: Target, toolchain: Toolchain) -> dict[str, str]:
        env = {
            # Set even with one VS installed: we activate the toolset ourselves, setuptools must not pick another.
            "DISTUTILS_USE_SDK": "1",
            "CMAKE_GENERATOR": toolchain.generator,
        }
        if toolchain.generator != "Ninja":
            vs = target.compat.visual_studio_for_toolset(toolchain.msvc_toolset or "")
            if vs.generator_platform:
                env["CMAKE_GENERATOR_PLATFORM"] = vs.generator_platform
            env["CMAKE_GENERATOR_TOOLSET"] = f"version={toolchain.msvc_toolset}"
        cuda = target.cuda
        if cuda is not None:
            major, minor = version_key(cuda.version)[:2]
            # Several CUDA installs side by side: pick this one by its versioned variable (source document 000).
            env["CUDA_PATH"] = f"%CUDA_PATH_V{major}_{minor}%"
            if toolchain.generator == "Ninja" and toolchain.visual_studio == 2015:
                env["PREBUILD_COMMAND"] = VS2015_PREBUILD
                env["PREBUILD_COMMAND_ARGS"] = "x86_amd64"
        if target.options.compiler_cache == "clcache":
            env.update({"USE_CLCACHE": "1", "CC": "clcache", "CXX": "clcache"})
        return env
