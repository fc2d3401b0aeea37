"""The script a fresh environment runs: this folder loaded as a package, then smoke_checks.main.

    python run_checks.py --expect-version 2.13.0+cpu --expect-cuda cpu ...   (smoke_checks.py lists the options)

The checks import each other relatively (``from .smoke_base import ...``), as they do inside torchbuild. The package
is loaded from this file's folder by location, under a name of its own: nothing is added to sys.path (an embeddable
CPython's ._pth file leaves this folder off it anyway), so no file here can shadow a module the checks import.
Standard library only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

PACKAGE = "torchbuild_smoke_checks"


def load(module: str) -> ModuleType:
    """``module`` (smoke_checks, checks_core, ...) of this folder, imported as part of the package PACKAGE."""
    if PACKAGE not in sys.modules:
        folder = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location(
            PACKAGE, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"{PACKAGE}.{module}")


if __name__ == "__main__":
    sys.exit(load("smoke_checks").main())
