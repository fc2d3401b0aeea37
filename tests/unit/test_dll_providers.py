"""Which DLLs a cell ships and where they come from (torchbuild/dll_providers.py), with real PE files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.pe_fixtures import PeFixtures, build
from torchbuild import dll_providers
from torchbuild.dll_providers import Provider, ProviderData, ProviderError
from torchbuild.options import RunOptions


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> PeFixtures:
    return build(tmp_path_factory.mktemp("pe"))


def test_cpu_cell_ships_the_vc_runtime() -> None:
    assert dll_providers.required_dlls("win-64", "2.5.1", "cpu", None) == ("msvcp140.dll", "vcruntime140_1.dll")
    assert torch_plan("win-64", "cpu", "3.11", "2.5.1").ship_dlls == ("msvcp140.dll", "vcruntime140_1.dll")


def test_cuda_cell_ships_the_cuda_runtime_but_never_driver_dlls() -> None:
    plan = torch_plan("win-64", "12.4", "3.12", "2.5.1")
    assert {"cudart64_12.dll", "cublasLt64_12.dll", "nvJitLink_120_0.dll", f"cudnn64_{plan.cudnn}.dll"} <= set(
        plan.ship_dlls
    )
    assert not {"nvcuda.dll", "nvml.dll"} & {d.lower() for d in plan.ship_dlls}


def test_linux_cells_ship_no_dlls() -> None:
    assert torch_plan("linux-64", "cpu", "3.11", "2.13.0").ship_dlls == ()


def test_every_shipped_dll_has_a_provider() -> None:
    data = dll_providers.load()
    for cuda in ("cpu", "11.8", "12.4", "12.8"):
        for pattern in dll_providers.required_dlls("win-64", "2.5.1", cuda, 9):
            assert data.provider_for(pattern) is not None, pattern


def _windows_data(directory_template: str) -> ProviderData:
    provider = Provider(name="vc", dlls=("msvcp140*.dll",), windows=(directory_template,), wheel=None)
    return ProviderData(ship=(), providers=(provider,))


def _locate_msvcp140_on_windows(
    tmp_path: Path, directory_template: str, env: dict[str, str], cuda: str = "cpu", cudnn: int | None = None
) -> list[dll_providers.Located]:
    """msvcp140.dll from one provider that looks only in ``directory_template`` (Windows rules, this ``env``)."""
    return dll_providers.locate(
        ["msvcp140.dll"],
        cuda=cuda,
        cudnn=cudnn,
        python="3.11",
        cache_dir=tmp_path / "cache",
        log=tmp_path / "log",
        on_windows=True,
        env=env,
        data=_windows_data(directory_template),
    )


def test_windows_directories_with_variables(fixtures: PeFixtures, tmp_path: Path) -> None:
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    shutil.copyfile(fixtures.base, system32 / "msvcp140.dll")
    located = _locate_msvcp140_on_windows(tmp_path, r"%SystemRoot%\System32", {"SystemRoot": str(tmp_path / "Windows")})
    assert [(hit.name, hit.provider) for hit in located] == [("msvcp140.dll", "vc")]
    assert located[0].path == system32 / "msvcp140.dll"


def test_a_provider_that_lacks_the_dll_names_it_and_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "Windows" / "System32").mkdir(parents=True)
    with pytest.raises(ProviderError) as info:
        _locate_msvcp140_on_windows(tmp_path, r"%SystemRoot%\System32", {"SystemRoot": str(tmp_path / "Windows")})
    message = str(info.value)
    assert message.startswith("msvcp140.dll is needed in the wheel but provider 'vc' lacks it")
    assert str(tmp_path / "Windows" / "System32") in message


def test_unset_variable_is_said(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=r"%CUDA_PATH_V12_4%\\bin \(variable not set\)"):
        _locate_msvcp140_on_windows(tmp_path, r"%CUDA_PATH_V{cuda_major}_{cuda_minor}%\bin", {}, cuda="12.4", cudnn=9)


def test_a_32_bit_dll_from_a_provider_is_refused(fixtures: PeFixtures, tmp_path: Path) -> None:
    shutil.copyfile(fixtures.base32, tmp_path / "msvcp140.dll")
    with pytest.raises(ProviderError, match=r"msvcp140\.dll .* is a I386 DLL; a win_amd64 wheel needs AMD64"):
        _locate_msvcp140_on_windows(tmp_path, "%DIR%", {"DIR": str(tmp_path)})


def test_no_provider_for_a_dll(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=r"no DLL provider in dll_providers\.yaml gives nothere64_1\.dll"):
        dll_providers.locate(
            ["nothere64_1.dll"], cuda="cpu", cudnn=None, python="3.11", cache_dir=tmp_path, log=tmp_path / "log"
        )


@pytest.mark.slow
def test_msvc_runtime_wheel_provides_the_vc_runtime(tmp_path: Path) -> None:
    """The real msvc-runtime win_amd64 wheel from the package index (downloaded once into the pipeline's cache)."""
    cache = RunOptions().cache_dir
    located = dll_providers.locate(
        ["msvcp140.dll", "vcruntime140_1.dll"],
        cuda="cpu",
        cudnn=None,
        python="3.11",
        cache_dir=cache,
        log=tmp_path / "pip.log",
        on_windows=False,
    )
    assert [hit.name for hit in located] == ["msvcp140.dll", "vcruntime140_1.dll"]
    assert all(hit.origin.startswith("wheel msvc_runtime-") for hit in located)
    lacking = r"msvcp140_nothere\.dll is needed in the wheel but provider 'msvc-runtime'"
    with pytest.raises(ProviderError, match=lacking):
        dll_providers.locate(
            ["msvcp140_nothere.dll"], cuda="cpu", cudnn=None, python="3.11", cache_dir=cache, log=tmp_path / "pip.log"
        )
