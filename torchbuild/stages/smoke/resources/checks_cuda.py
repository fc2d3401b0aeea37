"""The CUDA runtime checks of upstream's release smoke test (``smoke_test_cuda`` in pytorch/pytorch's
``.ci/pytorch/smoke_test/smoke_test.py``) that need a GPU and no other check makes: the NCCL torch reports on Linux
against the ``nvidia-nccl-*`` distribution installed beside it, and a device-side assert surfacing as a Python
RuntimeError that names CUDA (a build whose errors are lost fails silently instead). The assert leaves the process's
CUDA context unusable, so this check runs alone in its process (smoke_checks.PROCESSES). Standard library only at
module level.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from .smoke_base import (
    CheckFailed,
    Expect,
    Outcome,
    gpu_present,
    torch_folder,
    torch_module,
)

NCCL_DISTRIBUTION = re.compile(r"^nvidia-nccl(-cu\d+)?$")


def installed_nccl() -> tuple[str, str] | None:
    """(name, version) of the nvidia-nccl distribution installed in this environment, if any."""
    from importlib import metadata  # 15 ms: only when the check runs

    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "").lower()
        if NCCL_DISTRIBUTION.match(name):
            return name, str(dist.version)
    return None


def nccl_state(torch: Any) -> str:
    """What torch's NCCL is and whether the installed distribution is the one it reports (raises CheckFailed)."""
    if sys.platform == "win32":
        return "NCCL: none on Windows"
    nccl = getattr(torch.cuda, "nccl", None)
    if nccl is None or not hasattr(nccl, "version"):
        return "NCCL: this release cannot say"
    try:
        version = nccl.version()
    except (AttributeError, RuntimeError) as exc:  # a build without NCCL has no torch._C._nccl_version
        return f"NCCL: none in this build ({type(exc).__name__})"
    reported = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    installed = installed_nccl()
    if installed is None:
        return f"NCCL {reported} (no nvidia-nccl distribution in this environment to compare)"
    name, found = installed
    if found.split(".")[: len(reported.split("."))] != reported.split("."):  # 2.28.9 is 2.28.9 or 2.28.9.x
        raise CheckFailed(f"torch reports NCCL {reported}, but the environment's {name} is {found}")
    return f"NCCL {reported} from {name} {found}"


def device_assert_state(torch: Any) -> str:
    """A failing torch._assert_async on the GPU must surface as a RuntimeError naming CUDA."""
    if not hasattr(torch, "_assert_async"):
        return f"device-side assert: torch {torch.__version__} has no torch._assert_async"
    try:
        torch._assert_async(torch.tensor(0, device="cuda"))
        torch.cuda.synchronize()
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if "CUDA" not in str(exc):
            raise CheckFailed(f"a device-side assert raised a RuntimeError that does not name CUDA: {first}") from exc
        return f"a device-side assert surfaced as RuntimeError: {first}"
    raise CheckFailed("a failing torch._assert_async on the GPU raised nothing: CUDA errors are lost")


def check_cuda_runtime(expect: Expect) -> Outcome:
    torch_folder()  # torch is there (found, not imported)
    if expect.cuda == "cpu":  # said without importing torch (seconds under Wine): the import check holds the Plan
        return Outcome("skipped", "skipped (CPU build)")
    torch = torch_module()
    if torch.version.cuda is None:
        return Outcome("skipped", f"skipped (torch {torch.__version__} is a CPU build; the import check compares it "
                       "with the Plan)")  # fmt: skip
    said = [nccl_state(torch)]  # the library's version needs no GPU
    if torch.cuda.is_available():
        torch.cuda.init()
        said.insert(0, f"{torch.cuda.device_count()} device(s), {torch.cuda.get_device_name(0)}")
        said.append(device_assert_state(torch))  # last: the CUDA context is unusable after it
    else:
        why = "no GPU"
        if gpu_present():
            why = "a GPU is present but CUDA is not available: the cuda matmul check says why"
        said.append(f"device-side assert not run ({why})")
    return Outcome("passed", "; ".join(said))


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "cuda runtime": check_cuda_runtime,
}
