"""The smoke check of each package installed beside torch that has no checks of its own (a package a copy of
companions.yaml adds, compiled from a checkout or taken from a wheel; ``--expect-companion NAME=VERSION``): after
``import torch``, it imports from the environment, not from elsewhere, with the version the Plan says; whatever its
import loads, its extension libraries among them, loads against this environment's torch or the check fails. What it
does beyond importing is the user's to check: matrix.yaml ``test_command`` runs in both environments after these
checks. Standard library only at module level (copied into the fresh environments with smoke_checks.py).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable

from .smoke_base import CheckFailed, Expect, Outcome, torch_module

NAME = "companion import"


def check_companion_import(expect: Expect) -> Outcome:
    torch = torch_module()
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
    said, problems = [], []
    for name, version in expect.companions:
        started = time.perf_counter()
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # what a user's `import <name>` would raise, said as it is
            problems.append(f"import {name} after torch {torch.__version__} failed: {type(exc).__name__}: {exc}")
            continue
        took = time.perf_counter() - started
        where = os.path.realpath(getattr(module, "__file__", "") or "")
        got = str(getattr(module, "__version__", ""))
        if got.split("+")[0] != version.split("+")[0]:
            problems.append(f"{name}.__version__ is {got or 'missing'}, the Plan says {version}")
        if os.path.dirname(os.path.dirname(where)) != prefix:
            problems.append(f"{name} was imported from {where}, not from the environment's {prefix}")
        said.append(f"{name} {got} from {where} ({took:.1f} s)")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome("passed", f"beside torch {torch.__version__}: " + "; ".join(said))


CHECKS: dict[str, Callable[[Expect], Outcome]] = {NAME: check_companion_import}
