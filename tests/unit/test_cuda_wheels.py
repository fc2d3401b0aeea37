"""The libraries a torch wheel leaves to its declared requirements (torchbuild/data/cuda_wheels.yaml), as the Plan
states them for real cells: PyPI's linux CUDA 12.8 and 13.0 wheels, torch 2.3.1's Windows wheel and its mkl."""

from __future__ import annotations

from torchbuild.config import matrix
from torchbuild.config.matrix import Cell
from torchbuild.knowledge import cuda_wheels
from torchbuild.knowledge.pypi_to_conda import marker_environment
from torchbuild.plan import Plan, resolve

MATRIX = matrix.parse("build:\n  max_jobs: 8\n", "test-matrix.yaml")


def plan_of(platform: str, cuda: str, python: str, torch: str) -> Plan:
    return resolve(Cell(platform=platform, cuda=cuda, python=python, torch=torch), MATRIX)


def by_name(plan: Plan) -> dict[str, cuda_wheels.RequirementWheel]:
    return {w.name: w for w in plan.declared_libraries}


def test_torch_2_3_1_on_windows_takes_mkl_from_its_requirement() -> None:
    plan = plan_of("win-64", "cpu", "3.12", "2.3.1")
    wheels = by_name(plan)
    assert sorted(wheels) == ["intel-openmp", "mkl", "tbb"]
    mkl = wheels["mkl"]
    assert (mkl.version, mkl.file) == ("2021.4.0", "mkl-2021.4.0-py2.py3-none-win_amd64.whl")
    assert mkl.sha256 == "ceef3cafce4c009dd25f65d7ad0d833a0fbadc3d8903991ec92351fe5de1e718"
    assert mkl.requirement == 'mkl <=2021.4.0,>=2021.1.1 ; platform_system == "Windows"'
    # intel-openmp comes through mkl's own requirement, and says so
    assert wheels["intel-openmp"].requirement == mkl.requirement
    assert "through mkl <=2021.4.0,>=2021.1.1" in wheels["intel-openmp"].describe()
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    assert provided["mkl_intel_thread.1.dll"].startswith("mkl==2021.4.0 (mkl-2021.4.0-")


def test_other_windows_cells_declare_nothing() -> None:
    assert plan_of("win-64", "cpu", "3.12", "2.5.1").declared_libraries == ()
    assert plan_of("linux-64", "cpu", "3.11", "2.13.0").declared_libraries == ()


def test_the_windows_marker_is_evaluated_for_the_target() -> None:
    linux = marker_environment("linux-64", "3.12")
    assert cuda_wheels.declared_libraries("win-64", "2.3.1", "cpu", linux) == ()


def test_linux_cuda_12_8_wheel_pins_every_nvidia_library() -> None:
    plan = plan_of("linux-64", "12.8", "3.11", "2.10.0")
    wheels = by_name(plan)
    assert len(wheels) == 15
    runtime = wheels["nvidia-cuda-runtime-cu12"]
    assert (runtime.version, runtime.libraries) == ("12.8.90", ("nvidia/cuda_runtime/lib/libcudart.so.12",))
    # cuBLAS is declared by torch itself (cuDNN requires it too): credited to torch's own line
    assert wheels["nvidia-cublas-cu12"].requirement.startswith("nvidia-cublas-cu12==12.8.4.1;")
    assert wheels["nvidia-cudnn-cu12"].version == "9.10.2.21"
    provided = cuda_wheels.provided_libraries(plan.declared_libraries)
    assert provided["libcudnn.so.9"].startswith("nvidia-cudnn-cu12==9.10.2.21")
    # cuda-bindings, cuda-pathfinder and triton install no library torch links: not in the fact
    assert not {"cuda-bindings", "cuda-pathfinder", "triton"} & set(wheels)


def test_cuda_13_libraries_come_through_cuda_toolkit_extras() -> None:
    plan = plan_of("linux-64", "13.0", "3.12", "2.11.0")
    cublas = by_name(plan)["nvidia-cublas"]
    assert cublas.version == "13.1.0.3"
    assert cublas.requirement.startswith("cuda-toolkit[cublas,")
    assert "nvidia/cu13/lib/libcublas.so.13" in cublas.libraries


def test_a_release_whose_wheel_is_another_cuda_declares_nothing_for_the_cell() -> None:
    assert cuda_wheels.unlabelled_cuda("linux-64", "2.10.0", "12.8")
    assert not cuda_wheels.unlabelled_cuda("linux-64", "2.11.0", "12.8")  # PyPI's 2.11.0 is CUDA 13.0
    assert not cuda_wheels.unlabelled_cuda("win-64", "2.10.0", "12.8")
    assert plan_of("linux-64", "12.8", "3.11", "2.11.0").declared_libraries == ()


def test_a_missing_library_names_the_requirement_that_should_have_provided_it() -> None:
    wheels = plan_of("linux-64", "12.8", "3.11", "2.10.0").declared_libraries
    said = cuda_wheels.should_have_provided("libcublas.so.13", wheels)
    assert said.startswith("the declared requirement nvidia-cublas-cu12==12.8.4.1")
    assert "libcublas.so.12" in said and said.endswith("not libcublas.so.13")
    nowhere = cuda_wheels.should_have_provided("libfoo.so.1", wheels)
    assert nowhere.startswith("no declared requirement provides it (the wheel declares nvidia-cuda-nvrtc-cu12==")
    assert cuda_wheels.should_have_provided("libfoo.so.1", ()) == ""
