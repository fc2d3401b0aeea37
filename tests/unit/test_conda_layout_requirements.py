"""The conda smoke on a host of the cell's platform installs pytorch and its companions from their .conda files and
what they require from pip: torchvision's pillow too (the corpus's linux CUDA 12.8 pair failed `import torchvision`
with "No module named 'PIL'" when only torch's requirements were installed). The METADATA lines are torch 2.10.0's
and torchvision 0.25.0's as their wheels carry them."""

from __future__ import annotations

import pytest

from torchbuild.stages.smoke.env import BackendError
from torchbuild.stages.smoke.venv import pip_requirements

TORCH = ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", 'setuptools; python_version >= "3.12"',
         'opt-einsum>=3.3; extra == "opt-einsum"', 'nvidia-nccl-cu12==2.27.5; platform_system == "Linux"']  # fmt: skip
VISION = ["numpy", "torch==2.10.0", "pillow!=8.3.*,>=5.3.0", 'gdown>=4.7.3; extra == "gdown"', "filelock"]


def test_companions_requirements_come_from_pip_but_what_conda_installed() -> None:
    assert pip_requirements(TORCH, {"torchvision": VISION, "torchaudio": ["torch==2.10.0"]}) == [
        "filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", 'setuptools; python_version >= "3.12"',
        'nvidia-nccl-cu12==2.27.5; platform_system == "Linux"', "numpy", "pillow!=8.3.*,>=5.3.0",
    ]  # fmt: skip


def test_a_companion_named_as_a_requirement_is_not_fetched_from_pip() -> None:
    """torchaudio requiring torchvision (as some releases' extras do) must not pull PyPI's torchvision over the
    conda-installed one."""
    assert pip_requirements(["filelock"], {"torchvision": VISION, "torchaudio": ["torchvision", "torch"]}) == [
        "filelock", "numpy", "pillow!=8.3.*,>=5.3.0",
    ]  # fmt: skip


def test_a_malformed_line_names_whose_metadata_has_it() -> None:
    with pytest.raises(BackendError, match="torchvision's METADATA: invalid Requires-Dist 'pillow >= '"):
        pip_requirements(["filelock"], {"torchvision": ["pillow >= "]})
