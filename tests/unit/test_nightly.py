"""Which files are nightlies, where they go, and which ones ``index --keep-nightlies`` keeps (channels/nightly.py)."""

from __future__ import annotations

import pytest

from torchbuild.channels import conda_path, nightly, wheel_path


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torch-2.10.0.dev20251105+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        ("pytorch-2.10.0.dev20251105-py3.11_cpu_0.conda", True),
        ("pytorch-2.10.0.dev20251105-py3.11_cpu_0.tar.bz2", True),
        ("torch-2.6.0a0+git1eba9b3-cp311-cp311-linux_x86_64.whl", False),  # a source build: not a nightly
        ("torch-2.5.1rc1-cp311-cp311-linux_x86_64.whl", False),
        ("pytorch-2.5.1-py3.11_cpu_0.conda", False),
        ("pytorch-1.0_weird-py3.11_0.conda", False),  # no PEP 440 version: a release, never pruned
    ],
)
def test_a_nightly_is_a_dev_version_in_the_file_name(name: str, expected: bool) -> None:
    assert nightly.is_nightly(name) is expected


def test_places() -> None:
    night = "torch-2.10.0.dev20251105+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert wheel_path(night) == f"whl/nightly/simple/torch/{night}"
    release = "torch-2.5.1-cp311-cp311-linux_x86_64.whl"
    assert wheel_path(release) == f"whl/simple/torch/{release}"
    assert conda_path("linux-64", "pytorch-2.10.0.dev20251105-py3.11_cpu_0.conda") == (
        "label/nightly/linux-64/pytorch-2.10.0.dev20251105-py3.11_cpu_0.conda"
    )
    assert conda_path("linux-64", "pytorch-2.5.1-py3.11_cpu_0.conda") == "linux-64/pytorch-2.5.1-py3.11_cpu_0.conda"


def wheel(night: str, local: str = "cpu", python: str = "cp311") -> str:
    return f"whl/nightly/simple/torch/torch-2.10.0.dev{night}+{local}-{python}-{python}-manylinux_2_28_x86_64.whl"


def package(night: str, subdir: str = "linux-64") -> str:
    return f"label/nightly/{subdir}/pytorch-2.10.0.dev{night}-py3.11_cpu_0.conda"


def test_retention_counts_nights_per_package_and_platform_and_never_returns_a_release() -> None:
    paths = [
        wheel("20251103"), wheel("20251104"), wheel("20251105"),
        wheel("20251103", "cu126"), wheel("20251105", "cu126"),  # the same nights as +cpu: no night more
        wheel("20251101", python="cp312"),  # its own platform: its one night is its newest
        package("20251103"), package("20251104"), package("20251105"), package("20251104", "win-64"),
        "whl/simple/torch/torch-2.5.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "linux-64/pytorch-2.5.1-py3.11_cpu_0.conda",
    ]  # fmt: skip
    assert nightly.expired(paths, 2) == sorted([wheel("20251103"), wheel("20251103", "cu126"), package("20251103")])
    assert nightly.expired(paths, 3) == []
    assert nightly.expired(paths, 1) == sorted([
        wheel("20251103"), wheel("20251104"), wheel("20251103", "cu126"), package("20251103"), package("20251104"),
    ])  # fmt: skip
    with pytest.raises(ValueError, match="keep at least one night"):
        nightly.expired(paths, 0)
