"""Fixtures of the users' own builds, made from real releases' wheels the way a source build leaves them.

A source build (``python setup.py bdist_wheel`` in a checkout, no ``PYTORCH_BUILD_VERSION``) is named
``X.Y.Za0+git<sha7>`` and says so in torch/version.py (``__version__``, ``git_version``); a nightly is
``X.Y.Z.devYYYYMMDD[+cpu]``. Its Windows wheel carries no VC runtime (the builder's machine has it in System32) and,
where MKL and Intel OpenMP came from the builder's environment, no libiomp5md.dll: ``drop`` leaves such members out.
These are fixtures named as such: the real release's binaries under an own build's version and shape.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from torchbuild.wheel.rewrite import rewrite
from torchbuild.wheel.version import set_version

GIT_SHA = "1eba9b3c0ffee0ddba11ad0c0ffee0ddba11ad00"


def own_build(
    wheel: Path, dest_dir: Path, version: str, *, git_version: str = GIT_SHA, drop: Callable[[str], bool] | None = None
) -> Path:
    """``wheel`` as an own build of ``version``: the dist-info and torch/version.py say it; ``drop``: members left
    out (and out of RECORD), as a source build's wheel lacks them."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        renamed = set_version(wheel, Path(tmp), version)
        with zipfile.ZipFile(renamed) as archive:
            text = archive.read("torch/version.py").decode("utf-8")
        text = re.sub(r"^__version__(.*?)= '[^']*'", rf"__version__\1= '{version}'", text, flags=re.MULTILINE)
        text = re.sub(r"^git_version(.*?)= '[^']*'", rf"git_version\1= '{git_version}'", text, flags=re.MULTILINE)
        dest = dest_dir / renamed.name
        return rewrite(renamed, dest, files={"torch/version.py": text.encode("utf-8")}, drop=drop)
