"""Smoke checks beyond the core, at least what upstream's release smoke test checks
(``.ci/pytorch/smoke_test/smoke_test.py`` of pytorch/pytorch) and more: the build configuration recorded
(``torch.__config__.show()``, which upstream prints), conv2d and SVD against a float64 reference (upstream runs
them and compares nothing), a numpy round trip of every dtype both share, ``torch.compile`` on a Linux host with a
C++ compiler (upstream: Linux and macOS), and on the GPU where there is one. The C++ consumer is checks_consumer.py's;
what the installed distribution declares (its metadata, its console scripts) is checked by checks_install.py.
Standard library only at module level.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from . import compile_results
from .smoke_base import (
    CheckFailed,
    Expect,
    Outcome,
    after_first_process,
    built_with,
    cxx_compiler,
    gpu_present,
    host_description,
    numpy_module,
    torch_folder,
    torch_module,
)

RTOL_FLOAT32 = 1e-4
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


def check_compile(expect: Expect) -> Outcome:
    folder = torch_folder()  # torch is there (found, not imported: where the check is skipped, torch is not loaded)
    if not sys.platform.startswith("linux"):
        return Outcome("skipped", f"skipped (checked on Linux hosts, as upstream does; this is {host_description()})")
    compiler = cxx_compiler()
    if compiler is None:
        return Outcome("skipped", "skipped (no C++ compiler: none of $CXX, g++, c++, clang++ on PATH)")
    shared = compile_results.shared_dir()
    if shared is None or gpu_present():  # inductor's Triton kernels: compiled in every environment
        return _compile_here(compiler)
    try:
        key = compile_results.content_key(folder.parent, compiler)
    except OSError:  # a file that could not be read: nothing to compare with, so compile
        return _compile_here(compiler)
    # before torch is imported: an environment of a content checked before does not import torch._dynamo at all
    return compile_results.once(shared, key, lambda: _compile_here(compiler))


def _compile_here(compiler: str) -> Outcome:
    after_first_process()
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
    # A cache of its own, so that this compiles rather than reading what another environment compiled; and the
    # temporary folder too: inductor writes its precompiled headers (450 MB) under tempfile.gettempdir() whatever its
    # cache is, and they would stay there.
    with tempfile.TemporaryDirectory(prefix="smoke-inductor-") as cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        tempfile.tempdir = os.environ["TMPDIR"] = cache
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


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "build config": check_build_config,
    "conv2d": check_conv2d,
    "linalg svd": check_linalg_svd,
    "numpy round trip": check_numpy_round_trip,
    "torch.compile": check_compile,
}
# Cheap ones run in the core's first process (torch imported once, which under Wine takes seconds); torch.compile
# and the C++ build each in a process of their own, beside the others (smoke_checks.PROCESSES).
WITH_IMPORT = ("build config", "conv2d", "linalg svd", "numpy round trip")
