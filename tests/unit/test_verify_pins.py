"""verify's solve with the wheel's exact pins: which run dependencies no stored record has (left out and named),
read from the real stored repodata (torchbuild/data/repodata before ../shared/data/repodata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import torch_plan
from torchbuild.stages.verify.solve import _unrecorded_pins, _versions_in


@pytest.fixture()
def stored(repodata: Path) -> dict[str, set[str]]:
    solve = torch_plan("linux-64", "12.8", "3.11", "2.10.0").solve  # the records torchbuild stores, from the Plan
    assert (solve.channel, solve.overlay) == ("conda-forge", "repodata/conda-forge")
    assert solve.overlay_channel is not None
    return _versions_in([solve.overlay_channel, repodata / "conda-forge"], "linux-64")


def test_the_stored_records_serve_the_cuda_12_8_pins(stored: dict[str, set[str]]) -> None:
    depends = ["libcublas 12.8.4.1.*", "cuda-cudart 12.8.90.*", "nccl 2.27.5.*", "filelock", "sympy >=1.13.3"]
    assert _unrecorded_pins(depends, stored) == {}


def test_a_pin_conda_forge_never_packaged_is_named_with_what_is_stored(stored: dict[str, set[str]]) -> None:
    depends = ["cusparselt 0.7.1.*", "libnvshmem3 3.4.5.*", "triton ==3.6.0", "libcublas 12.8.4.1.*", "triton"]
    found = _unrecorded_pins(depends, stored)
    assert set(found) == {"cusparselt", "libnvshmem3", "triton"}
    assert found["cusparselt"].startswith("cusparselt 0.7.1.* (stored: ")
    assert "0.7.0.0" in found["cusparselt"]
    assert found["libnvshmem3"] == "libnvshmem3 3.4.5.* (stored: no record of libnvshmem3)"
