"""The core smoke checks of an installed torch: import with the Plan's version, CUDA and cuDNN; OpenMP and MKL; numpy
both ways round; a CPU and a CUDA matmul against a float64 reference; a DataLoader with spawned workers. Standard
library only at module level: torch and numpy are imported inside the checks, in the child processes."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .smoke_base import (
    CHECK_TIMEOUT_S,
    CheckFailed,
    Expect,
    Outcome,
    built_with,
    gpu_present,
    numpy_module,
    tail,
    torch_module,
)

MATMUL_N = 512
MATMUL_RTOL = 1e-3
DATALOADER_ITEMS = 103  # not a multiple of the batch size: the last, short batch must arrive too
DATALOADER_BATCH = 4


def check_import(expect: Expect) -> Outcome:
    started = time.perf_counter()
    torch = torch_module()
    took = time.perf_counter() - started
    problems = []
    if torch.__version__ != expect.version:
        problems.append(f"torch.__version__ is {torch.__version__}, the Plan says {expect.version}")
    want_cuda = None if expect.cuda == "cpu" else expect.cuda
    if torch.version.cuda != want_cuda:
        problems.append(f"torch.version.cuda is {torch.version.cuda}, the Plan says {want_cuda}")
    where = os.path.realpath(torch.__file__)
    if expect.torch_file and where != os.path.realpath(expect.torch_file):
        problems.append(f"torch was imported from {where}, not from the environment's {expect.torch_file}")
    cudnn = "no cuDNN (CPU build)"
    if want_cuda is not None:
        cudnn, cudnn_problem = _cudnn_versions(torch, expect.cudnn, expect.cudnn_version)
        if cudnn_problem:
            problems.append(cudnn_problem)
    loaded, outside = _loaded_from_environment(expect.from_environment)
    problems += outside
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome(
        "passed",
        f"torch {torch.__version__} (CUDA {want_cuda or 'none'}, {cudnn}) from {where}, imported in {took:.1f} s"
        + (f"; {loaded}" if loaded else ""),
    )


def _loaded_from_environment(names: tuple[str, ...]) -> tuple[str, list[str]]:
    """Of the libraries the wheel's declared requirements install, those this process has loaded (Linux:
    /proc/self/maps) must be the environment's files, not the system's; (what was found, problems)."""
    maps = "/proc/self/maps"
    if not names:
        return "", []
    if not os.path.exists(maps):
        return "the libraries' origins not read (no /proc/self/maps on this platform)", []
    wanted = set(names)
    paths = set()
    with open(maps, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
            if path.startswith("/") and os.path.basename(path) in wanted:
                paths.add(os.path.realpath(path))
    prefix = os.path.realpath(sys.prefix) + os.sep
    outside = sorted(p for p in paths if not p.startswith(prefix))
    problems = [f"{p} was loaded from outside the environment ({sys.prefix}), not its requirement's" for p in outside]
    dirs = sorted({os.path.dirname(os.path.relpath(p, prefix)) for p in paths if p.startswith(prefix)})
    found = f"{len(paths) - len(outside)} of the declared requirements' libraries loaded, each from the environment"
    return found + (f" ({', '.join(dirs[:3])}{' ...' if len(dirs) > 3 else ''})" if dirs else ""), problems


def _cudnn_versions(torch: Any, major: int | None, pinned: str | None = None) -> tuple[str, str]:
    """('cuDNN 9.10.2', problem or '') comparing the runtime cuDNN with the one torch was compiled against, and with
    the X.Y.Z the wheel's requirement pins (``pinned``)."""
    binding = getattr(torch._C, "_cudnn", None)
    if binding is None:
        return "no cuDNN", f"torch was built without cuDNN; the Plan says cuDNN {major}"
    runtime = tuple(binding.getRuntimeVersion())
    compiled = tuple(binding.getCompileVersion())
    text = "cuDNN " + ".".join(map(str, runtime))
    if runtime != compiled:
        found = ".".join(map(str, runtime))
        return text, f"cuDNN runtime {found} != compile-time {'.'.join(map(str, compiled))}"
    if major is not None and runtime[0] != major:
        return text, f"cuDNN major {runtime[0]}, the Plan says {major}"
    if pinned and ".".join(map(str, runtime)) != pinned:
        return text, f"cuDNN {'.'.join(map(str, runtime))} loaded, the wheel's requirement pins {pinned}"
    return text + (" as the wheel pins" if pinned else ""), ""


def check_openmp_mkl(expect: Expect) -> Outcome:
    """OpenMP must be there (upstream: every binary build has it); MKL where the build says it has it
    (``torch.__config__.show()``): a build against OpenBLAS or another BLAS is legitimate."""
    torch = torch_module()
    openmp = bool(torch.backends.openmp.is_available())
    mkl = bool(torch.backends.mkl.is_available())
    built_mkl = built_with(str(torch.__config__.show()))["MKL"]
    info = str(torch.__config__.parallel_info())
    backend = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if "parallel backend" in ln), "unknown")
    mkl_line = next((ln.strip() for ln in info.splitlines() if "Math Kernel Library" in ln), "")
    message = (
        f"OpenMP {'available' if openmp else 'NOT available'} (ATen parallel backend: {backend}, "
        f"{torch.get_num_threads()} threads); MKL {'available' if mkl else 'not available'}"
        + (f" ({mkl_line})" if mkl_line else "")
        + f", the build {'has' if built_mkl else 'has no'} MKL"
    )
    if not openmp or (built_mkl and not mkl):
        raise CheckFailed(message)
    return Outcome("passed", message)


def _numpy_interop(np: Any, torch: Any) -> str:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor = torch.from_numpy(array)
    array[0, 0] = 42.0
    if tensor[0, 0].item() != 42.0:
        raise CheckFailed("torch.from_numpy does not share memory with the numpy array")
    doubled = (tensor * 2).numpy()
    if not np.array_equal(doubled, array * 2):
        raise CheckFailed("Tensor.numpy() does not round-trip")
    if torch.tensor(np.ones(2, dtype=np.float64)).dtype != torch.float64:
        raise CheckFailed("torch.tensor(float64 ndarray) did not keep float64")
    # Run both libraries' parallel code: a second OpenMP runtime aborts here if it did not already at import.
    x = torch.randn(256, 256)
    y = np.random.default_rng(0).random((256, 256))
    float((x @ x).sum())
    float((y @ y).sum())
    return f"numpy {np.__version__} with torch {torch.__version__}: from_numpy/numpy() share memory, matmuls ran"


def check_numpy_then_torch(expect: Expect) -> Outcome:
    np = numpy_module()
    torch = torch_module()
    return Outcome("passed", "import numpy; import torch: " + _numpy_interop(np, torch))


def check_torch_then_numpy(expect: Expect) -> Outcome:
    torch = torch_module()
    np = numpy_module()
    return Outcome("passed", "import torch; import numpy: " + _numpy_interop(np, torch))


def _relative_error(np: Any, got: Any, reference: Any) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - reference) / np.linalg.norm(reference))


def check_cpu_matmul(expect: Expect) -> Outcome:
    torch = torch_module()
    np = numpy_module()
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
    b = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
    reference = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)  # numpy's BLAS, not torch's
    error = _relative_error(np, (a @ b).numpy(), reference)
    message = f"float32 {MATMUL_N}x{MATMUL_N} matmul vs float64 reference: relative error {error:.1e} "
    if not error < MATMUL_RTOL:
        raise CheckFailed(message + f"(limit {MATMUL_RTOL:g})")
    return Outcome("passed", message + f"(< {MATMUL_RTOL:g})")


def check_cuda_matmul(expect: Expect) -> Outcome:
    torch = torch_module()
    np = numpy_module()
    has_gpu = gpu_present()
    if torch.version.cuda is None:
        return Outcome("skipped", "skipped (CPU build; a GPU is present)" if has_gpu else "skipped (no GPU)")
    if not torch.cuda.is_available():
        if has_gpu:
            raise CheckFailed(
                "an NVIDIA GPU is present but torch.cuda.is_available() is False (driver too old "
                f"for CUDA {torch.version.cuda}, or the CUDA libraries did not load)"
            )
        return Outcome("skipped", "skipped (no GPU)")
    major, minor = torch.cuda.get_device_capability(0)
    name = torch.cuda.get_device_name(0)
    arch_list = list(torch.cuda.get_arch_list())
    sm = f"sm_{major}{minor}"
    if not any(arch == sm or (arch.startswith(sm) and arch[len(sm) :] in ("a", "f")) for arch in arch_list):
        raise CheckFailed(
            f"{name} has capability {major}.{minor} ({sm}), which is not in torch.cuda.get_arch_list() "
            f"{arch_list}: kernels fail with 'no kernel image is available for execution on the device'"
        )
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if torch.backends.cuda.matmul.allow_tf32:
        raise CheckFailed("could not turn TF32 off for matmul: the comparison would measure TF32's rounding")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
    b = torch.randn(MATMUL_N, MATMUL_N, generator=generator)
    got = (a.cuda() @ b.cuda()).cpu().numpy()
    torch.cuda.synchronize()
    reference = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
    error = _relative_error(np, got, reference)
    message = f"{name} ({sm}): float32 matmul, tf32 off, vs float64 reference: relative error {error:.1e} "
    if not error < MATMUL_RTOL:
        raise CheckFailed(message + f"(limit {MATMUL_RTOL:g})")
    return Outcome("passed", message + f"(< {MATMUL_RTOL:g})")


DATALOADER_SCRIPT = f'''\
"""Generated by smoke_checks.py: a DataLoader with 2 workers under the spawn start method."""
import json
import os

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Items(Dataset):
    def __len__(self):
        return {DATALOADER_ITEMS}

    def __getitem__(self, index):
        info = get_worker_info()
        return torch.tensor([index, info.id if info is not None else -1, os.getpid()])


if __name__ == '__main__':
    # per batch; the first waits for two spawned workers to import torch: under Wine on a loaded 2-core host that
    # passed 120 s (the corpus's 2.2.1/3.12), still well inside the check's own limit
    loader = DataLoader(Items(), batch_size={DATALOADER_BATCH}, num_workers=2, multiprocessing_context="spawn",
                        timeout=240)
    rows = [row for batch in loader for row in batch.tolist()]
    print(json.dumps({{"start_method": loader.multiprocessing_context.get_start_method(), "main_pid": os.getpid(),
                      "rows": rows}}))
'''


def check_dataloader_spawn(expect: Expect) -> Outcome:
    # The script lives outside the working directory (which stays empty) and is run as __main__ by path, so
    # that spawned workers re-import it the way they re-import a user's script.
    with tempfile.TemporaryDirectory(prefix="smoke-dataloader-") as tmp:
        script = Path(tmp) / "dataloader_spawn.py"
        script.write_text(DATALOADER_SCRIPT, encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    if proc.returncode != 0:
        output = tail(proc.stdout + proc.stderr)
        print(output, file=sys.stderr)  # becomes this check's output
        last = output.splitlines()[-1] if output else "no output"
        raise CheckFailed(f"the DataLoader script exited {proc.returncode}: {last}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rows: list[list[int]] = result["rows"]
    counts = collections.Counter(row[0] for row in rows)
    expected = collections.Counter(range(DATALOADER_ITEMS))
    workers = sorted({row[1] for row in rows})
    worker_pids = {row[2] for row in rows}
    problems = []
    if counts != expected:
        missing = sorted((expected - counts).elements())
        repeated = sorted((counts - expected).elements())
        problems.append(f"items not seen exactly once: missing {missing[:10]}, repeated {repeated[:10]}")
    if result["start_method"] != "spawn":
        problems.append(f"start method was {result['start_method']}, not spawn")
    if workers != [0, 1] or result["main_pid"] in worker_pids or len(worker_pids) != 2:
        problems.append(f"items did not come from 2 worker processes (worker ids {workers}, {len(worker_pids)} pids)")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome(
        "passed",
        f"{DATALOADER_ITEMS} items, each exactly once, from 2 spawned workers "
        f"(batch size {DATALOADER_BATCH}, {len(rows)} rows)",
    )


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "import": check_import,
    "openmp mkl": check_openmp_mkl,
    "numpy then torch": check_numpy_then_torch,
    "torch then numpy": check_torch_then_numpy,
    "cpu matmul": check_cpu_matmul,
    "cuda matmul": check_cuda_matmul,
    "dataloader spawn": check_dataloader_spawn,
}

# The checks that share a child process, in the order they run there: "import" first (its time is torch's import
# alone), torch before numpy. "numpy then torch" needs a process where numpy comes first; the DataLoader check, which
# imports nothing itself (its script's process and workers import torch), follows it there. Every check is in
# exactly one.
PROCESSES = (
    ("import", "openmp mkl", "torch then numpy", "cpu matmul", "cuda matmul"),
    ("numpy then torch", "dataloader spawn"),
)
