"""Everything a Plan's compile needs on this host, found (``discover``, which ``doctor`` prints) and turned into the
variables the build process gets (``activate``). Nothing here changes this process's own environment.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torchbuild.host.interpreters import find_python, install_hint, searched
from torchbuild.host.platform import host_platform
from torchbuild.plan import Plan
from torchbuild.platforms import cuda, provision
from torchbuild.platforms.linux import gcc as gnu
from torchbuild.platforms.toolchain import Requirement, ToolchainError, describe_missing
from torchbuild.platforms.windows import msvc, traps


@dataclass(frozen=True)
class Activation:
    requirements: tuple[Requirement, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # added to / overriding os.environ for the build only
    cuda_root: Path | None = None
    python: str | None = None  # the interpreter that builds (the Plan's Python X.Y)
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(r.found or not r.required for r in self.requirements)


def _tool(name: str, environ: Mapping[str, str], fix: str, required: bool = True) -> Requirement:
    found = shutil.which(name, path=environ.get("PATH"))
    return Requirement(name, found is not None, found or "not on PATH", fix, required)


def discover(
    plan: Plan,
    cache_dir: Path,
    environ: Mapping[str, str] | None = None,
    *,
    provision_cuda: bool = True,
    capture: bool = True,
    log: Path | None = None,
    host: str | None = None,
) -> Activation:
    """Every requirement of the Plan's build on this host. ``provision_cuda``: fetch a missing CUDA 13.x from the
    package index (``doctor`` only says it would); ``capture``: run vcvarsall.bat on Windows."""
    env = dict(os.environ if environ is None else environ)
    host = host or host_platform()
    if not plan.platform_module.compiles_on(host):
        return Activation(
            requirements=(
                Requirement(
                    f"a {plan.platform} host",
                    False,
                    f"this host is {host}; {plan.platform} cells compile on {plan.platform}",
                    f"run this cell on a {plan.platform} machine (CI: the matrix's runner for {plan.platform}), or use "
                    "a prebuilt wheel (drop --source-dir/--git-ref)",
                ),
            )
        )
    reqs: list[Requirement] = []
    python = find_python(plan.python, env)
    reqs.append(
        Requirement(
            f"Python {plan.python}",
            python is not None,
            python or f"no working Python {plan.python} {searched(plan.python)}",
            f"install Python {plan.python} (64-bit): `{install_hint(plan.python)}`",
        )
    )
    reqs.append(_tool("cmake", env, "install CMake >= 3.18 (pip install cmake, or the OS package)"))
    if plan.toolchain.generator == "Ninja":
        reqs.append(_tool("ninja", env, "install Ninja (pip install ninja, or the OS package)"))
    if plan.compiler_cache == "sccache":
        reqs.append(
            _tool(
                "sccache",
                env,
                "install sccache (cargo install sccache, or its release binary) to cache "
                "compiles between builds; the build runs without it",
                required=False,
            )
        )
    if plan.toolchain.compiler == "msvc":
        return _windows(plan, env, reqs, python, capture, cache_dir if provision_cuda else None, log)
    return _linux(plan, env, reqs, python, cache_dir, provision_cuda, log)


def activate(
    plan: Plan, cache_dir: Path, environ: Mapping[str, str] | None = None, log: Path | None = None
) -> Activation:
    """``discover`` for a build: any missing requirement is an error that lists each one with its fix."""
    found = discover(plan, cache_dir, environ, log=log)
    if not found.ok:
        raise ToolchainError(
            f"{plan.cell_id} cannot be compiled on this host; missing:\n{describe_missing(found.requirements)}"
        )
    return found


# --- Linux -----------------------------------------------------------------------------------------------


def _linux(
    plan: Plan,
    env: dict[str, str],
    reqs: list[Requirement],
    python: str | None,
    cache_dir: Path,
    provision_cuda: bool,
    log: Path | None,
) -> Activation:
    gcc = gnu.find_gcc(env)
    version = gnu.gcc_version(gcc) if gcc else None
    reqs.append(gnu.check_gcc(gcc, version, plan.toolchain.gcc_accepted, plan.toolchain.nvcc))
    if not plan.is_cuda:
        return Activation(requirements=tuple(reqs), python=python)
    wanted = plan.cuda
    notes = []
    candidates = gnu.nvcc_candidates(wanted, env, provision.cached(cache_dir, wanted, plan.platform))
    found, others = gnu.choose_nvcc(wanted, candidates, cuda.nvcc_version)
    if found is None and provision.recipe(wanted, plan.platform) is not None:
        if provision_cuda:
            root = provision.provision(wanted, plan.platform, cache_dir, log)
            found, _ = gnu.choose_nvcc(wanted, [(root, "provisioned from the package index")], cuda.nvcc_version)
            notes.append(f"CUDA {wanted} provisioned from the package index into {root}")
        else:
            reqs.append(
                Requirement(
                    f"nvcc {wanted}",
                    True,
                    f"not installed ({'; '.join(others) or 'no toolkit found'}); a run provisions it from the "
                    f"nvidia-cuda-nvcc=={wanted}.* wheels into "
                    f"{provision.cache_root(cache_dir, wanted, plan.platform)}",
                )
            )
            return Activation(requirements=tuple(reqs), python=python, notes=tuple(notes))
    if found is None:
        reqs.append(
            Requirement(
                f"nvcc {wanted}",
                False,
                f"no CUDA {wanted} toolkit "
                f"({'; '.join(others) or f'looked in /usr/local/cuda-{wanted}, CUDA_HOME, PATH'})",
                provision.not_provisionable_fix(wanted),
            )
        )
        return Activation(requirements=tuple(reqs), python=python)
    reqs.append(Requirement(f"nvcc {wanted}", True, f"{found.version.full} ({found.root}/bin/nvcc, via {found.how})"))
    if plan.cudnn is not None:
        include_dirs = cuda.cudnn_include_dirs(found.root, env, windows=False, cuda_version=wanted)
        reqs.append(cuda.find_cudnn(include_dirs, plan.cudnn, wanted))
    reqs.append(cuda.find_nvtx(found.root, env, windows=False, flavour=plan.toolchain.nvtx or ""))
    home = str(found.root)
    if plan.env.get("CUDA_HOME") not in (None, home):
        notes.append(f"CUDA_HOME is {home} (the Plan's default {plan.env.get('CUDA_HOME')} is not this host's)")
    activation_env = {
        "CUDA_HOME": home,
        "CUDA_PATH": home,
        "CUDACXX": f"{home}/bin/nvcc",
        "PATH": f"{home}/bin{os.pathsep}{env.get('PATH', '')}",
    }
    return Activation(tuple(reqs), activation_env, found.root, python, tuple(notes))


# --- Windows ---------------------------------------------------------------------------------------------


def _windows(
    plan: Plan,
    env: dict[str, str],
    reqs: list[Requirement],
    python: str | None,
    capture: bool,
    provision_into: Path | None,
    log: Path | None,
) -> Activation:
    notes: list[str] = []
    activation_env: dict[str, str] = {}
    try:
        installs = msvc.find_installs(env)
        installed = [(i, msvc.toolsets_of(i)) for i in installs]
        listing = "; ".join(f"{i.name} {i.update}: {', '.join(t) or 'no toolsets'}" for i, t in installed)
        reqs.append(Requirement("Visual Studio", bool(installs), listing or "none", msvc.VSWHERE_FIX))
        choice = msvc.choose_toolset(installed, plan.toolchain)
        reqs.append(Requirement(f"MSVC {plan.toolchain.msvc_toolset}", True, f"{choice.full} in {choice.install.path}"))
        if choice.note:
            notes.append(choice.note)
        reqs.extend(traps.check(choice.full, choice.install, plan.toolchain))
        if capture:
            activation_env.update(msvc.capture_vcvars(choice, env))
            command = f"{choice.vcvarsall} {' '.join(choice.args)}"
            reqs.append(Requirement("vcvarsall.bat", True, f"{command}: {len(activation_env)} variables"))
    except ToolchainError as exc:
        reqs.append(Requirement(f"MSVC {plan.toolchain.msvc_toolset}", False, str(exc), ""))
    cuda_root = None
    if plan.is_cuda:
        cuda_root = _windows_cuda(plan, env, reqs, provision_into, log)
        if cuda_root is not None:
            activation_env["CUDA_PATH"] = str(cuda_root)
            activation_env["CUDA_HOME"] = str(cuda_root)
            path = activation_env.get("PATH") or env.get("PATH", "")
            activation_env["PATH"] = f"{cuda_root / 'bin'}{os.pathsep}{path}"
    return Activation(tuple(reqs), activation_env, cuda_root, python, tuple(notes))


def _windows_cuda(
    plan: Plan, env: Mapping[str, str], reqs: list[Requirement], provision_into: Path | None, log: Path | None
) -> Path | None:
    """``%CUDA_PATH_Vx_y%``; for CUDA 13.x without one, the toolkit made from the nvidia-cuda-nvcc wheels (a run
    provisions it, doctor says it would)."""
    wanted = plan.cuda
    try:
        root = cuda.choose_windows_cuda(env, wanted)
    except ToolchainError as exc:
        if provision.recipe(wanted, plan.platform) is None:
            reqs.append(Requirement(f"nvcc {wanted}", False, str(exc), ""))
            return None
        if provision_into is None:
            reqs.append(
                Requirement(
                    f"nvcc {wanted}",
                    True,
                    f"not installed; a run provisions it from the nvidia-cuda-nvcc=={wanted}.* wheels",
                )
            )
            return None
        root = provision.provision(wanted, plan.platform, provision_into, log)
    nvcc = root / "bin" / "nvcc.exe"
    if not nvcc.is_file():
        reqs.append(
            Requirement(
                f"nvcc {wanted}",
                False,
                f"{cuda.cuda_path_var(wanted)}={root} has no bin\\nvcc.exe",
                "reinstall CUDA " + wanted,
            )
        )
        return None
    version = cuda.nvcc_version(nvcc)
    if version.release != wanted:
        reqs.append(
            Requirement(
                f"nvcc {wanted}",
                False,
                f"{nvcc} is CUDA {version.full}",
                f"point {cuda.cuda_path_var(wanted)} at a CUDA {wanted} install",
            )
        )
        return None
    reqs.append(Requirement(f"nvcc {wanted}", True, f"{version.full} ({nvcc})"))
    if plan.cudnn is not None:
        reqs.append(cuda.find_cudnn(cuda.cudnn_include_dirs(root, env, True, wanted), plan.cudnn, wanted))
    reqs.append(cuda.find_nvtx(root, env, windows=True, flavour=plan.toolchain.nvtx or ""))
    return root
