"""Which DLLs a cell ships and where they come from (torchbuild/knowledge/dll_providers.py), with real PE files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.pe_fixtures import PeFixtures
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.knowledge import dll_providers
from torchbuild.knowledge.dll_providers import Provider, ProviderData, ProviderError
from torchbuild.plan import Plan, WindowsFacts
from torchbuild.platforms.windows import providers as provider_dlls


def windows(plan: Plan) -> WindowsFacts:
    assert plan.windows is not None
    return plan.windows


def test_the_vc_runtime_names_follow_the_toolset() -> None:
    """MSVC 14.0/14.1x binaries (torch 1.0, 1.1) never import vcruntime140_1.dll; 14.40+ may import
    vcruntime140_threads.dll (torch 2.14.1's torch_cpu.dll does)."""
    old = torch_plan("win-64", "9.0", "3.6", "1.1.0")
    assert old.toolchain.msvc_toolset == "14.11"
    old_names = windows(old).redistributable_dlls
    assert "msvcp140.dll" in old_names and "vcruntime140_1.dll" not in old_names
    new = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    assert {"msvcp140.dll", "vcruntime140_1.dll", "msvcp140_atomic_wait.dll", "vcruntime140_threads.dll"} <= set(
        windows(new).redistributable_dlls
    )


def test_cuda_13_cells_name_cuda_13_dlls() -> None:
    plan = torch_plan("win-64", "13.0", "3.12", "2.14.1")
    names = set(windows(plan).redistributable_dlls)
    assert {"cudart64_13.dll", "cublas64_13.dll", "cufft64_12.dll", "cusolver64_12.dll", "nvrtc64_130_0.dll"} <= names
    assert {"nvrtc-builtins64_130.dll", "nvJitLink_130_0.dll", "cudnn64_9.dll"} <= names
    # CUDA 12's names are gone, but for cuRAND and cuSPARSE (which kept theirs), CUPTI's and cuDNN's.
    twelve = set(windows(torch_plan("win-64", "12.6", "3.12", "2.14.1")).redistributable_dlls)
    shared = {n for n in names & twelve if not n.startswith(("msvcp", "vcruntime", "concrt", "vcomp", "libiomp"))}
    assert shared == {"curand64_10.dll", "cusparse64_12.dll", "cupti64_*.dll", "cudnn64_9.dll", "cudnn_*64_9.dll"}
    assert not {"nvcuda.dll", "nvml.dll"} & {d.lower() for d in names}


def test_cuda_11_0_and_11_1_name_their_own_nvrtc() -> None:
    assert "nvrtc64_110_0.dll" in windows(torch_plan("win-64", "11.0", "3.8", "1.7.1")).redistributable_dlls
    assert "cusolver64_10.dll" in windows(torch_plan("win-64", "11.0", "3.8", "1.7.1")).redistributable_dlls
    eleven_one = windows(torch_plan("win-64", "11.1", "3.8", "1.8.1")).redistributable_dlls
    assert "nvrtc64_111_0.dll" in eleven_one and "nvrtc64_112_0.dll" not in eleven_one


def test_linux_cells_take_no_dlls() -> None:
    plan = torch_plan("linux-64", "cpu", "3.11", "2.13.0")
    assert (plan.windows, plan.conda.provided_dlls) == (None, {})


def test_every_redistributable_has_a_provider() -> None:
    data = dll_providers.load()
    for cuda, cudnn in (("cpu", None), ("11.0", 8), ("11.8", 9), ("12.4", 9), ("12.8", 9), ("13.0", 9)):
        for pattern in dll_providers.redistributable_dlls("win-64", "14.44", cuda, cudnn):
            assert data.provider_for(pattern) is not None, pattern


def test_what_is_loaded_by_name_is_found_to_a_fixed_point() -> None:
    rules = windows(torch_plan("win-64", "12.4", "3.11", "2.5.1")).loaded_by_name
    present = ["torch_cuda.dll", "cudnn64_9.dll", "cublasLt64_12.dll"]
    assert dll_providers.runtime_loaded(present, rules) == [
        "cudnn_*64_9.dll",
        "nvrtc64_120_0.dll",
        "nvrtc-builtins64_124.dll",
    ]
    assert dll_providers.runtime_loaded(["c10.dll", "torch_cpu.dll"], rules) == []


def test_conda_packages_provide_the_runtimes_of_a_cell() -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    provided = dll_providers.provided_members(
        ["torch/lib/libiomp5md.dll", "torch.libs/msvcp140.dll", "torch/lib/c10.dll", "torch/lib/uv.dll"],
        plan.conda.provided_dlls,
    )
    assert provided == {"torch/lib/libiomp5md.dll": "intel-openmp", "torch.libs/msvcp140.dll": "vc14_runtime"}
    cuda = torch_plan("win-64", "12.4", "3.11", "2.5.1")
    assert dll_providers.provided_members(["torch/lib/cudart64_12.dll"], cuda.conda.provided_dlls) == {
        "torch/lib/cudart64_12.dll": "cuda-cudart"
    }


def _windows_data(directory_template: str) -> ProviderData:
    provider = Provider(name="vc", dlls=("msvcp140*.dll",), windows=(directory_template,), wheels={})
    return ProviderData(providers=(provider,))


def _locate_msvcp140_on_windows(
    tmp_path: Path, directory_template: str, env: dict[str, str], cuda: str = "cpu", cudnn: int | None = None
) -> list[provider_dlls.Located]:
    """msvcp140.dll from one provider that looks only in ``directory_template`` (Windows rules, this ``env``)."""
    return provider_dlls.locate(
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


def test_windows_directories_with_variables(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    shutil.copyfile(pe_fixtures.base, system32 / "msvcp140.dll")
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


def test_a_32_bit_dll_from_a_provider_is_refused(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    shutil.copyfile(pe_fixtures.base32, tmp_path / "msvcp140.dll")
    with pytest.raises(ProviderError, match=r"msvcp140\.dll .* is a I386 DLL; a win_amd64 wheel needs AMD64"):
        _locate_msvcp140_on_windows(tmp_path, "%DIR%", {"DIR": str(tmp_path)})


def test_no_provider_for_a_dll(tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=r"no DLL provider in dll_providers\.yaml gives nothere64_1\.dll"):
        provider_dlls.locate(
            ["nothere64_1.dll"], dll_providers.load(), cuda="cpu", cudnn=None, python="3.11", cache_dir=tmp_path,
            log=tmp_path / "log",
        )


@pytest.mark.slow
def test_msvc_runtime_wheel_provides_the_vc_runtime(tmp_path: Path) -> None:
    """The real msvc-runtime win_amd64 wheel from the package index (downloaded once into the pipeline's cache)."""
    cache = RunOptions().cache_dir
    located = provider_dlls.locate(
        ["msvcp140.dll", "vcruntime140_1.dll"],
        dll_providers.load(),
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
        provider_dlls.locate(
            ["msvcp140_nothere.dll"], dll_providers.load(), cuda="cpu", cudnn=None, python="3.11", cache_dir=cache,
            log=tmp_path / "pip.log",
        )


def test_a_cuda_version_without_dll_data_is_refused_with_what_is_known() -> None:
    with pytest.raises(UserError) as info:
        dll_providers.redistributable_dlls("win-64", "14.44", "14.0", 9)
    message = str(info.value)
    assert message.startswith("dll_providers.yaml has no CUDA DLL names for CUDA 14.0")
    assert ">=13,<14" in message and "<11" in message
