"""Smoke checks beyond the core, at least what upstream's release smoke test checks
(``.ci/pytorch/smoke_test/smoke_test.py`` of pytorch/pytorch) and more: the build configuration recorded
(``torch.__config__.show()``, which upstream prints), conv2d and SVD against a float64 reference (upstream runs
them and compares nothing), a numpy round trip of every dtype both share, ``torch.compile`` on a Linux host with a
C++ compiler (upstream: Linux and macOS), a C++ consumer built with CMake's ``find_package(Torch)`` against the
installed torch and run (upstream builds one on Windows, conda-forge's recipe tests one). What the installed
distribution declares (its metadata, its console scripts) is checked by checks_install.py. Standard library only at
module level.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__:
    from torchbuild.stages.smoke.resources.smoke_base import (
        CHECK_TIMEOUT_S,
        CheckFailed,
        Expect,
        Outcome,
        built_with,
        numpy_module,
        tail,
        torch_folder,
        torch_module,
    )
else:  # in a test environment, beside smoke_base.py
    from smoke_base import (  # type: ignore[import-not-found,no-redef]
        CHECK_TIMEOUT_S,
        CheckFailed,
        Expect,
        Outcome,
        built_with,
        numpy_module,
        tail,
        torch_folder,
        torch_module,
    )

RTOL_FLOAT32 = 1e-4
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
# A = arange(12) as 3x4 is 506; a 3x3 all-ones kernel over 5x5 ones gives 9 at each of 2x3x3 outputs: 162).
CONSUMER_CPP = """\
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <iostream>
int main() {
  at::Tensor a = at::arange(12, at::kDouble).reshape({3, 4});
  at::Tensor conv = at::conv2d(at::ones({1, 1, 5, 5}), at::ones({2, 1, 3, 3}));
  std::cout << "{\\"trace\\": " << a.matmul(a.t()).trace().item<double>()
            << ", \\"conv\\": " << conv.sum().item<double>()
            << ", \\"threads\\": " << at::get_num_threads() << "}" << std::endl;
  return 0;
}
"""
CONSUMER_EXPECTED = {"trace": 506.0, "conv": 162.0}


def wine_version() -> str | None:
    """Wine's version when this Windows process runs under Wine (ntdll exports wine_get_version), else None."""
    if sys.platform != "win32":
        return None
    try:
        getter = ctypes.WinDLL("ntdll").wine_get_version  # type: ignore[attr-defined,unused-ignore]
    except (OSError, AttributeError):
        return None
    getter.restype = ctypes.c_char_p
    return str(getter().decode())


def _host() -> str:
    wine = wine_version()
    return f"Windows under Wine {wine}" if wine else f"{platform.system()} {platform.machine()}"


# --- the build's configuration -----------------------------------------------------------------------------


def check_build_config(expect: Expect) -> Outcome:
    torch = torch_module()
    config = str(torch.__config__.show())
    built = built_with(config)
    available = {
        "MKL": bool(torch.backends.mkl.is_available()),
        "OpenMP": bool(torch.backends.openmp.is_available()),
        "oneDNN": bool(torch.backends.mkldnn.is_available()),
    }
    capability = next((ln.split(":", 1)[1].strip() for ln in config.splitlines() if "CPU capability" in ln), "?")
    summary = ", ".join(f"{k} {'on' if built[k] else 'off'}" for k in built) + f"; CPU capability {capability}"
    problems = [
        f"built with {k} but torch.backends says it is not available" for k in built if built[k] and not available[k]
    ]
    if problems:
        raise CheckFailed("; ".join(problems) + f"\n{config}")
    return Outcome("passed", f"torch.__config__.show(): {summary}\n{config.rstrip()}")


# --- conv2d and SVD against float64 references -------------------------------------------------------------


def _conv_reference(torch: Any, x: Any, conv: Any) -> Any:
    """The convolution as unfold + matmul in float64: no convolution kernel of torch involved."""
    f = torch.nn.functional
    weight = conv.weight.detach().double()
    cols = f.unfold(x.double(), conv.kernel_size, dilation=conv.dilation, padding=conv.padding, stride=conv.stride)
    out = weight.reshape(weight.shape[0], -1) @ cols + conv.bias.detach().double()[:, None]
    h = (x.shape[2] + 2 * conv.padding[0] - conv.dilation[0] * (conv.kernel_size[0] - 1) - 1) // conv.stride[0] + 1
    w = (x.shape[3] + 2 * conv.padding[1] - conv.dilation[1] * (conv.kernel_size[1] - 1) - 1) // conv.stride[1] + 1
    return out.reshape(x.shape[0], weight.shape[0], h, w)


def _relative(torch: Any, got: Any, want: Any) -> float:
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


def check_conv2d(expect: Expect) -> Outcome:
    torch = torch_module()
    torch.manual_seed(0)
    nn = torch.nn
    # upstream's three: square kernel and equal stride; non-square kernel, unequal stride, padding; and dilation
    convs = [
        nn.Conv2d(16, 33, 3, stride=2),
        nn.Conv2d(16, 33, (3, 5), stride=(2, 1), padding=(4, 2)),
        nn.Conv2d(16, 33, (3, 5), stride=(2, 1), padding=(4, 2), dilation=(3, 1)),
    ]
    x = torch.randn(20, 16, 50, 100)
    worst = 0.0
    with torch.no_grad():
        for conv in convs:
            out = conv(x)
            reference = _conv_reference(torch, x[:2], conv)
            if tuple(out.shape[1:]) != tuple(reference.shape[1:]):
                raise CheckFailed(f"{conv}: output {tuple(out.shape)}, expected (20, {tuple(reference.shape[1:])})")
            worst = max(worst, _relative(torch, out[:2], reference))
    message = f"upstream's 3 Conv2d on 20x16x50x100 float32 vs float64 unfold+matmul: worst relative error {worst:.1e}"
    if not worst < RTOL_FLOAT32:
        raise CheckFailed(f"{message} (limit {RTOL_FLOAT32:g})")
    cuda = "no GPU: CUDA part not run"
    if torch.version.cuda is not None and torch.cuda.is_available():
        for dtype in (torch.float16, torch.float32, torch.float64):
            conv = convs[2].to(dtype).cuda()
            assert conv(torch.randn(20, 16, 50, 100, device="cuda", dtype=dtype)) is not None
        with torch.autocast("cuda"):
            assert nn.Conv2d(3, 3, 3).cuda()(torch.randn(1, 3, 24, 24, device="cuda")) is not None
        cuda = "CUDA float16/32/64 and autocast ran"
    elif torch.version.cuda is None:
        cuda = "CPU build"
    return Outcome("passed", f"{message}; {cuda}")


def check_linalg_svd(expect: Expect) -> Outcome:
    torch = torch_module()
    torch.manual_seed(0)
    worst = 0.0
    shapes = []
    for shape, full in (((5, 3), False), ((5, 3), True), ((7, 5, 3), False)):
        a = torch.randn(*shape)
        u, s, vh = torch.linalg.svd(a, full_matrices=full)
        shapes.append("x".join(map(str, u.shape)))
        k = s.shape[-1]
        rebuilt = u[..., :k] @ torch.diag_embed(s) @ vh
        worst = max(worst, _relative(torch, rebuilt, a.double()))
        eye = torch.eye(k, dtype=a.dtype).expand(*u.shape[:-2], k, k)
        worst = max(worst, float((u[..., :k].transpose(-2, -1) @ u[..., :k] - eye).abs().max()))
    message = f"torch.linalg.svd of 5x3 (reduced, full) and 7x5x3 (U {', '.join(shapes)}): U S Vh vs A and U^T U vs I"
    message += f", worst error {worst:.1e}"
    if not worst < RTOL_FLOAT32:
        raise CheckFailed(f"{message} (limit {RTOL_FLOAT32:g})")
    if torch.version.cuda is not None and torch.cuda.is_available():
        for dtype in (torch.float32, torch.float64):
            torch.linalg.svd(torch.randn(20, 16, 50, 100, device="cuda", dtype=dtype))
        message += "; CUDA float32/64 ran"
    return Outcome("passed", message)


def check_numpy_round_trip(expect: Expect) -> Outcome:
    torch = torch_module()
    np = numpy_module()
    if torch.tensor(np.arange(5)).tolist() != [0, 1, 2, 3, 4]:  # upstream's
        raise CheckFailed("torch.tensor(np.arange(5)) is not [0, 1, 2, 3, 4]")
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
             "complex128"]  # fmt: skip
    bad = []
    for name in names:
        array = (np.arange(24) % 2 == 0) if name == "bool" else (np.arange(24) - 7).astype(name)
        array = array.reshape(2, 3, 4)
        back = torch.from_numpy(array).numpy()
        if back.dtype != array.dtype or not np.array_equal(back, array):
            bad.append(f"{name} came back as {back.dtype}")
        strided = torch.from_numpy(array[:, ::2, 1:]).clone().numpy()  # a non-contiguous view, copied
        if not np.array_equal(strided, array[:, ::2, 1:]):
            bad.append(f"{name}: a strided view differs after the round trip")
    if bad:
        raise CheckFailed("; ".join(bad))
    return Outcome("passed", f"numpy {np.__version__} -> torch -> numpy: {len(names)} dtypes, contiguous and strided")


def importlib_module(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


# --- torch.compile -------------------------------------------------------------------------------------------


def _compiler() -> str | None:
    for name in (os.environ.get("CXX", ""), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    return None


def check_compile(expect: Expect) -> Outcome:
    torch_folder()  # torch is there (found, not imported: where the check is skipped, torch is not loaded)
    if not sys.platform.startswith("linux"):
        return Outcome("skipped", f"skipped (checked on Linux hosts, as upstream does; this is {_host()})")
    compiler = _compiler()
    if compiler is None:
        return Outcome("skipped", "skipped (no C++ compiler: none of $CXX, g++, c++, clang++ on PATH)")
    torch = torch_module()
    if not hasattr(torch, "compile"):
        return Outcome("skipped", f"skipped (torch {torch.__version__} has no torch.compile: 2.0 and later)")
    dynamo = importlib_module("torch._dynamo")
    supported = getattr(dynamo, "is_dynamo_supported", None)
    if supported is not None and not supported():
        return Outcome("skipped", f"skipped (torch {torch.__version__} does not support torch.compile on Python "
                       f"{sys.version_info[0]}.{sys.version_info[1]})")  # fmt: skip

    def foo(x: Any) -> Any:
        return torch.sin(x) + torch.cos(x)

    ran = []
    # A cache of its own, so that this compiles rather than reading what another environment compiled.
    with tempfile.TemporaryDirectory(prefix="smoke-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        for dtype in (torch.float32, torch.float64):
            x = torch.rand(3, 3).type(dtype)
            try:
                compiled = torch.compile(foo)(x)
            except RuntimeError as exc:
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if "not supported" in text or "not yet supported" in text:
                    return Outcome("skipped", f"skipped (torch {torch.__version__}: {text})")
                raise
            torch.testing.assert_close(foo(x), compiled)
            ran.append(str(dtype).replace("torch.", ""))
        codecache = importlib_module("torch._inductor.codecache")
        isa = codecache.pick_vec_isa()
        if not isa:
            raise CheckFailed("torch._inductor found no vectorized ISA for this CPU")
        on_gpu = _compile_on_cuda(torch, foo)
    return Outcome("passed", f"torch.compile(sin(x) + cos(x)) matches eager for {', '.join(ran)} with {compiler} "
                   f"(inductor's CPU ISA {type(isa).__name__}, {isa.bit_width()} bits){on_gpu}")  # fmt: skip


def _compile_on_cuda(torch: Any, foo: Callable[[Any], Any]) -> str:
    """Upstream compiles on the GPU where there is one (inductor's Triton kernels): float16, float32 and float64 on
    cuda:0, each against eager; how to say it (what ran, or why not)."""
    if torch.version.cuda is None:
        return ""
    if not torch.cuda.is_available():
        return "; CUDA part not run (no GPU)"
    ran = []
    for dtype in (torch.float16, torch.float32, torch.float64):
        x = torch.rand(3, 3, device="cuda").type(dtype)
        torch.testing.assert_close(foo(x), torch.compile(foo)(x))
        ran.append(str(dtype).replace("torch.", ""))
    triton = sys.modules.get("triton")
    through = f"Triton {triton.__version__}" if triton is not None else "inductor"
    return f"; on {torch.cuda.get_device_name(0)}: {', '.join(ran)} through {through}"


# --- a C++ consumer ------------------------------------------------------------------------------------------


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


def _cuda_toolkit_missing(cuda: str) -> str:
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


def check_cpp_consumer(expect: Expect) -> Outcome:
    folder = torch_folder()
    if sys.platform == "win32" and not shutil.which("cl"):
        return Outcome("skipped", f"skipped (no MSVC here, {_host()}: a C++ consumer of torch on Windows is built "
                       "with MSVC, cl.exe is not on PATH)")  # fmt: skip
    if sys.platform != "win32" and _compiler() is None:
        return Outcome("skipped", "skipped (no C++ compiler: none of $CXX, g++, c++, clang++ on PATH)")
    cmake = shutil.which("cmake")
    if cmake is None:
        return Outcome("skipped", "skipped (no cmake on PATH)")
    if sys.platform != "win32" and expect.cuda != "cpu" and (missing := _cuda_toolkit_missing(expect.cuda)):
        # TorchConfig.cmake of a CUDA build finds the CUDA toolkit (Caffe2's cuda.cmake) or stops with "Your
        # installed Caffe2 version uses CUDA but I cannot find the CUDA libraries"
        return Outcome("skipped", f"skipped (a CUDA torch's find_package(Torch) needs the CUDA toolkit's headers and "
                       f"cudart of its CUDA {expect.cuda}: this host has {missing})")  # fmt: skip
    config = folder / "share" / "cmake"
    if not (config / "Torch" / "TorchConfig.cmake").is_file():
        raise CheckFailed(f"{config / 'Torch' / 'TorchConfig.cmake'} is missing: find_package(Torch) cannot work")
    with tempfile.TemporaryDirectory(prefix="smoke-consumer-") as tmp:
        project = Path(tmp)
        (project / "CMakeLists.txt").write_text(CONSUMER_CMAKE, encoding="utf-8")
        (project / "consumer.cpp").write_text(CONSUMER_CPP, encoding="utf-8")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        # the toolkit checked above, named: FindCUDA takes its root from the first nvcc on PATH, which may be a
        # wrapper outside it (this project's Linux machines: /usr/local/bin/nvcc -> /usr/local/cuda-13.0/bin/nvcc)
        cuda = [] if sys.platform == "win32" or expect.cuda == "cpu" else [
            f"-DCUDA_TOOLKIT_ROOT_DIR={_cuda_root()}", f"-DCUDAToolkit_ROOT={_cuda_root()}"]
        _run([cmake, "-S", ".", "-B", "build", *generator, f"-DCMAKE_PREFIX_PATH={config}",
              "-DCMAKE_BUILD_TYPE=Release", *cuda], project, "cmake (configure)")  # fmt: skip
        _run([cmake, "--build", "build", "--config", "Release", "--parallel", "2"], project, "cmake --build")
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
    return Outcome("passed", f"CMake project with find_package(Torch) ({config}) built and run: ATen matmul and "
                   f"conv2d give the known answers, {out.get('threads')} threads")  # fmt: skip


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "build config": check_build_config,
    "conv2d": check_conv2d,
    "linalg svd": check_linalg_svd,
    "numpy round trip": check_numpy_round_trip,
    "torch.compile": check_compile,
    "c++ consumer": check_cpp_consumer,
}
# Cheap ones run in the core's first process (torch imported once, which under Wine takes seconds); torch.compile
# and the C++ build each in a process of their own, beside the others (smoke_checks.PROCESSES).
WITH_IMPORT = ("build config", "conv2d", "linalg svd", "numpy round trip")
