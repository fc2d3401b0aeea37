"""The smoke's C++ consumer: a CMake project with ``find_package(Torch)`` built against the installed torch's
``share/cmake`` and run (upstream's Windows smoke builds one against libtorch, conda-forge's recipe tests one): ATen
gives known answers, on the GPU too where a CUDA build has one. Skipped with the reason where it cannot be built:
no MSVC on Windows (and under Wine), no C++ compiler or cmake, a CUDA torch without its CUDA toolkit's headers.
Standard library only at module level.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import consumer_cache
from .smoke_base import (
    CHECK_TIMEOUT_S,
    CheckFailed,
    Expect,
    Outcome,
    cxx_compiler,
    gpu_present,
    host_description,
    tail,
    torch_folder,
)

CONSUMER_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(torchbuild_consumer CXX)
find_package(Torch REQUIRED)
add_executable(consumer consumer.cpp)
target_link_libraries(consumer "${TORCH_LIBRARIES}")
get_target_property(torch_standard torch CXX_STANDARD)
if(NOT torch_standard)
  set(torch_standard 17)
endif()
set_property(TARGET consumer PROPERTY CXX_STANDARD ${torch_standard})
"""
# The C++ standard is the one the release's TorchConfig.cmake gives its torch target (20 from 2.13 on; 2.14's
# headers need it: "'requires' does not name a type" under C++17), else 17.
# ATen, the library every C++ consumer links: a matmul and a conv2d with known answers (trace of A A^T for
# A = arange(12) as 3x4 is 506; a 3x3 all-ones kernel over 5x5 ones gives 9 at each of 2x3x3 outputs: 162). Where
# ATen has CUDA (a CUDA build's torch_cuda linked in, a GPU there) the matmul runs on the GPU too; -1: it has none.
CONSUMER_CPP = """\
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <iostream>
int main() {
  at::Tensor a = at::arange(12, at::kDouble).reshape({3, 4});
  at::Tensor conv = at::conv2d(at::ones({1, 1, 5, 5}), at::ones({2, 1, 3, 3}));
  double on_gpu = -1;
  if (at::hasCUDA()) {
    at::Tensor g = a.to(at::kCUDA);
    on_gpu = g.matmul(g.t()).trace().item<double>();
  }
  std::cout << "{\\"trace\\": " << a.matmul(a.t()).trace().item<double>()
            << ", \\"conv\\": " << conv.sum().item<double>()
            << ", \\"cuda\\": " << on_gpu
            << ", \\"threads\\": " << at::get_num_threads() << "}" << std::endl;
  return 0;
}
"""
CONSUMER_EXPECTED = {"trace": 506.0, "conv": 162.0}


def _run(argv: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace", env=env,
                          timeout=CHECK_TIMEOUT_S, check=False)  # fmt: skip
    if proc.returncode != 0:
        output = tail(proc.stdout + proc.stderr)
        print(output, file=sys.stderr)  # becomes this check's output
        last = output.splitlines()[-1] if output else "no output"
        raise CheckFailed(f"{what} exited {proc.returncode}: {last}")
    return proc.stdout


def _cuda_root() -> Path:
    return Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda")


def cuda_toolkit_missing(cuda: str) -> str:
    """Why the CUDA toolkit here (CUDA_HOME, else /usr/local/cuda) cannot serve a consumer of a CUDA ``cuda`` torch
    (its headers missing, or another CUDA major: CUDART_VERSION of cuda_runtime_api.h); "" where it can."""
    root = _cuda_root()
    header = root / "include" / "cuda_runtime_api.h"
    if not header.is_file():
        return f"no {header}"
    found = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", header.read_text(encoding="utf-8", errors="replace"))
    if found is None:
        return f"no CUDART_VERSION in {header}"
    version = int(found[1])
    toolkit = f"{version // 1000}.{version % 1000 // 10}"
    if toolkit.split(".")[0] != cuda.split(".")[0]:
        return f"CUDA toolkit {toolkit} at {root}, not CUDA {cuda.split('.')[0]}.x"
    # TorchConfig.cmake links CUDA's nvrtc (Caffe2's cuda.cmake): a toolkit installed in part (nvcc, cudart) lacks it
    if not any((root / lib / "libnvrtc.so").exists() for lib in ("lib64", "lib", "targets/x86_64-linux/lib")):
        return f"CUDA toolkit {toolkit} at {root} without libnvrtc.so, which find_package(Torch) links"
    return ""


def _compile_inputs(configure: list[str], cuda: list[str]) -> list[str]:
    """What decides the consumer's object besides torch's headers and cmake files: the project, the configure line
    (without this environment's paths), the compiler's and cmake's versions, the CUDA toolkit's runtime header."""
    versions = [_run([tool, "--version"], Path.cwd(), f"{tool} --version") for tool in (cxx_compiler() or "", "cmake")]
    header = _cuda_root() / "include" / "cuda_runtime_api.h"
    toolkit = header.read_text(encoding="utf-8", errors="replace") if cuda and header.is_file() else ""
    flags = [arg for arg in configure if not arg.startswith("-DCMAKE_PREFIX_PATH=")]
    return [CONSUMER_CMAKE, CONSUMER_CPP, " ".join(flags[1:]), *versions, toolkit]


def check_cpp_consumer(expect: Expect) -> Outcome:
    folder = torch_folder()
    if sys.platform == "win32" and not shutil.which("cl"):
        return Outcome("skipped", f"skipped (no MSVC here, {host_description()}: a C++ consumer of torch on Windows is "
                       "built with MSVC, cl.exe is not on PATH)")  # fmt: skip
    if sys.platform != "win32" and cxx_compiler() is None:
        return Outcome("skipped", "skipped (no C++ compiler: none of $CXX, g++, c++, clang++ on PATH)")
    cmake = shutil.which("cmake")
    if cmake is None:
        return Outcome("skipped", "skipped (no cmake on PATH)")
    if sys.platform != "win32" and expect.cuda != "cpu" and (missing := cuda_toolkit_missing(expect.cuda)):
        # TorchConfig.cmake of a CUDA build finds the CUDA toolkit (Caffe2's cuda.cmake) or stops with "Your
        # installed Caffe2 version uses CUDA but I cannot find the CUDA libraries"
        return Outcome("skipped", f"skipped (a CUDA torch's find_package(Torch) needs the CUDA toolkit's headers and "
                       f"cudart of its CUDA {expect.cuda}: this host has {missing})")  # fmt: skip
    config = folder / "share" / "cmake"
    if not (config / "Torch" / "TorchConfig.cmake").is_file():
        raise CheckFailed(f"{config / 'Torch' / 'TorchConfig.cmake'} is missing: find_package(Torch) cannot work")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    # the toolkit checked above, named: FindCUDA takes its root from the first nvcc on PATH, which may be a
    # wrapper outside it (this project's Linux machines: /usr/local/bin/nvcc -> /usr/local/cuda-13.0/bin/nvcc)
    cuda = [] if sys.platform == "win32" or expect.cuda == "cpu" else [
        f"-DCUDA_TOOLKIT_ROOT_DIR={_cuda_root()}", f"-DCUDAToolkit_ROOT={_cuda_root()}"]
    configure = [cmake, "-S", ".", "-B", "build", *generator, f"-DCMAKE_PREFIX_PATH={config}",
                 "-DCMAKE_BUILD_TYPE=Release", *cuda]  # fmt: skip
    shared = None if sys.platform == "win32" else consumer_cache.shared_dir()
    key = consumer_cache.content_key(folder, _compile_inputs(configure, cuda)) if shared is not None else ""
    with tempfile.TemporaryDirectory(prefix="smoke-consumer-") as tmp:
        project = Path(tmp)
        (project / "CMakeLists.txt").write_text(CONSUMER_CMAKE, encoding="utf-8")
        (project / "consumer.cpp").write_text(CONSUMER_CPP, encoding="utf-8")
        link = consumer_cache.cached_link(shared, key, folder, project / "build") if shared is not None else None
        if shared is not None and link is not None:
            for argv in link:
                _run(argv, project / "build", "linking the consumer (compiled for this content before)")
            built = f"compiled once for this content ({shared / key[:12]}...), linked and run here"
        else:
            _run(configure, project, "cmake (configure)")
            _run([cmake, "--build", "build", "--config", "Release", "--parallel", "2"], project, "cmake --build")
            built = "built and run"
        exe = next((p for p in (project / "build").rglob("consumer*") if p.is_file() and os.access(p, os.X_OK)
                    and p.suffix in ("", ".exe")), None)  # fmt: skip
        if exe is None:
            raise CheckFailed("cmake --build made no consumer executable")
        env = dict(os.environ)
        if sys.platform == "win32":  # the DLLs beside torch's, as a user's PATH would have them
            env["PATH"] = f"{folder / 'lib'}{os.pathsep}{env.get('PATH', '')}"
        out = json.loads(_run([str(exe)], project, "the consumer", env).strip().splitlines()[-1])
        wrong = {k: out.get(k) for k, v in CONSUMER_EXPECTED.items() if out.get(k) != v}
        if wrong:
            raise CheckFailed(f"the consumer computed {wrong}, expected {CONSUMER_EXPECTED}")
        on_gpu = _consumer_gpu(expect, out)
        if shared is not None and link is None:  # kept only once it passed
            consumer_cache.store(shared, key, folder, project / "build")
    return Outcome("passed", f"CMake project with find_package(Torch) ({config}) {built}: ATen matmul and "
                   f"conv2d give the known answers, {out.get('threads')} threads{on_gpu}")  # fmt: skip


def _consumer_gpu(expect: Expect, out: dict[str, Any]) -> str:
    """What the consumer's GPU matmul says of a CUDA build: the known answer on the GPU, or why it did not run."""
    on_gpu = out.get("cuda", -1)
    if expect.cuda == "cpu":
        return ""
    if on_gpu == -1:
        if gpu_present():  # the linker dropped torch_cuda, or ATen's CUDA did not load: at::hasCUDA() is false
            raise CheckFailed("a GPU is present, but at::hasCUDA() is false in the C++ consumer: a program linked "
                              "with ${TORCH_LIBRARIES} cannot use CUDA")  # fmt: skip
        return "; the GPU matmul not run (no GPU)"
    if on_gpu != CONSUMER_EXPECTED["trace"]:
        raise CheckFailed(f"the consumer's matmul on the GPU gave {on_gpu}, expected {CONSUMER_EXPECTED['trace']}")
    return "; the same matmul on the GPU (at::kCUDA) gives it too"


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "c++ consumer": check_cpp_consumer,
}
