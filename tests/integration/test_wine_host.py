"""torchbuild itself on a Windows host under Wine (issue 43): python.org's embeddable CPython 3.11 for Windows with
pip and torchbuild's win_amd64 dependencies (scripts/wine_host.py), running `pipeline.py plan` and `doctor` for
the win-64 CPU cell. What passes here passed under Wine, not on Windows."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath
from types import ModuleType

import pytest

from tests.builders import torch_plan
from tests.conftest import ROOT
from tests.cuda_win_fixture import VARIANTS, build_wheel
from torchbuild.config.options import RunOptions
from torchbuild.host import downloads, pip
from torchbuild.knowledge import dll_providers
from torchbuild.platforms.windows import pe, providers, wine

pytestmark = [pytest.mark.nightly, pytest.mark.usefixtures("needs_wine")]
CELL = ["--platform", "win-64", "--cuda", "cpu", "--py", "3.11"]
CACHE = RunOptions().cache_dir


def wine_host(*args: str) -> subprocess.CompletedProcess[str]:
    """scripts/wine_host.py ARGS: a Windows host with Windows's defaults (its programs' output in cp1252, which
    wine_host.py decodes and writes here as UTF-8)."""
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "wine_host.py"), *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=1800, check=False, cwd=ROOT)  # fmt: skip


@pytest.fixture(scope="module")
def host() -> str:
    proc = wine_host("prepare")
    assert proc.returncode == 0, proc.stderr
    assert "CPython 3.11.9 embeddable" in proc.stdout
    return proc.stdout


def test_plan_runs_under_wine_on_the_embeddable_cpython(host: str) -> None:
    proc = wine_host("run", "--", "plan", *CELL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.replace("\r\n", "\n")
    assert out.startswith("plan win-64-cpu-py3.11\n")
    assert "  platform                         win-64\n" in out
    # the build dependencies by their file names (url2pathname once made them "S:\files.pythonhosted.org\...")
    assert "mkl-include (mkl_include-2024.2.0-py2.py3-none-win_amd64.whl)" in out
    assert "Traceback" not in proc.stdout + proc.stderr


def test_doctor_runs_under_wine_and_names_what_is_missing_with_the_fix(host: str) -> None:
    proc = wine_host("run", "--", "doctor", *CELL)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # missing: Visual Studio, cmake, ninja
    out = proc.stdout
    assert "+ Python 3.11" in out and "python.exe" in out  # the Windows python.exe under Wine; ✓ is not in cp1252
    assert "vswhere.exe not found at C:\\Program Files (x86)\\Microsoft Visual Studio\\Installer\\vswhere.exe" in out
    assert "Fix: install Visual Studio 2017 or newer (Build Tools are enough)" in out
    assert "x cmake" in out and "fix: install CMake" in out
    assert "Traceback" not in proc.stdout + proc.stderr


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wine_host", ROOT / "scripts" / "wine_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_prefix_is_laid_out_with_the_real_vc_runtime_that_the_repairs_system32_provider_takes(
    tmp_path: Path,
) -> None:
    found = wine.find()
    assert found is not None
    prefix = wine.fresh_prefix(found, CACHE, tmp_path / "prefix")
    system32 = prefix / "drive_c" / "windows" / "system32"
    assert pe.file_version((system32 / "msvcp140.dll").read_bytes(), "msvcp140.dll") is None  # Wine's own

    script = _script()
    script.lay_out_system32(prefix, script.vc_runtime_dlls(CACHE))
    # the data's %SystemRoot%\\System32, as a Windows program under Wine sees it (names case-insensitive there)
    windows = tmp_path / "windows"
    windows.mkdir()
    (windows / "System32").symlink_to(system32)
    located = providers.locate(
        ["msvcp140.dll", "vcruntime140_1.dll"], dll_providers.load(), cuda="cpu", cudnn=None, python="3.11",
        cache_dir=tmp_path / "cache", log=tmp_path / "providers.log", on_windows=True,
        env={"SystemRoot": str(windows)},
    )  # fmt: skip
    assert [(hit.name, hit.provider, hit.wheel) for hit in located] == [
        ("msvcp140.dll", "msvc-runtime", None), ("vcruntime140_1.dll", "msvc-runtime", None)
    ]  # fmt: skip
    assert {Path(hit.origin).resolve() for hit in located} == {system32.resolve()}  # System32, not the provider wheel
    assert pe.file_version(located[0].path.read_bytes(), "msvcp140.dll") == "14.44.35211.0"
    assert not (tmp_path / "cache").exists(), "the provider wheel was not needed"


UNDER_WINE_CHOICE = """
import sys
from pathlib import Path
from torchbuild import plan
from torchbuild.config import matrix
from torchbuild.host.platform import wine_version
from torchbuild.stages.smoke.venv import VenvBackend
wanted = matrix.Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.13.0")
cell = plan.resolve(wanted, matrix.load(Path("matrix.yaml")))
backend = VenvBackend(cell, sys.executable, Path("torch.whl"))
print(wine_version(), backend.extras(), backend.where)
"""


def test_a_windows_host_under_wine_takes_smoke_envs_rows_for_wine_and_says_so(host: str, tmp_path: Path) -> None:
    """Wine 8.0's ucrtbase lacks crealf, which numpy >= 2.1 imports: smoke_envs.yaml's `wine: true` rows pin an older
    numpy. The smoke on a Windows host under Wine must take them, as the Linux host's Wine smoke does."""
    script = _script()
    found = wine.find()
    assert found is not None
    python = script.prepare("3.11", CACHE).python
    settings = script.Settings()
    prefix = wine.fresh_prefix(found, CACHE, tmp_path / "prefix", settings.user)
    with wine.Session(found, prefix, settings.env) as session:
        ran = session.run([python, "-c", UNDER_WINE_CHOICE], timeout=600, cwd=ROOT)
    assert ran.returncode == 0, wine.without_noise(ran.stderr)
    assert ran.stdout.strip().startswith(f"{found.version} ['numpy<=2.0.2']"), ran.stdout
    assert ran.stdout.strip().endswith(f"on this win-64 host under Wine {found.version} (Python 3.11.9)"), ran.stdout


# --- provider discovery from a Windows build machine's layout (CUDA_PATH_V12_8, oneAPI) ------------------------------

CUDA_HOME = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.8"
REPAIR_ON_THE_WINDOWS_SIDE = """
import json, sys
from pathlib import Path
from torchbuild import plan
from torchbuild.config import matrix
from torchbuild.knowledge import dll_providers
from torchbuild.config.options import RunOptions
from torchbuild.host import downloads, pip
from torchbuild.platforms.windows import providers
from torchbuild.results import Artifact
from torchbuild.stages import Context
from torchbuild.stages.repair import stage as repair
from torchbuild.wheel.provenance import SourceInfo
wheel, work = Path(sys.argv[1]), Path(sys.argv[2])
cell = plan.resolve(matrix.Cell(platform="win-64", cuda="12.8", python="3.11", torch=sys.argv[3]),
                    matrix.load(Path("matrix.yaml")))
info = work / "source.json"
SourceInfo("wheel", str(wheel), "", "", 1_700_000_000, "the Windows CUDA fixture").write(info)
inputs = {"built_wheel": Artifact.of(wheel), "source_info": Artifact.of(info)}
result = repair.run(Context(plan=cell, root=work / "work", options=RunOptions(cache_dir=work / "cache"), inputs=inputs))
located = providers.locate(["mkl_core.2.dll", "libiomp5md.dll"], dll_providers.load(), cuda="12.8", cudnn=None,
                           python="3.11", cache_dir=work / "cache", log=work / "providers.log")
print(json.dumps({"status": str(result.status), "message": result.message,
                  "wheel": str(result.outputs["repaired_wheel"].path) if "repaired_wheel" in result.outputs else None,
                  "mkl": [[hit.name, hit.origin] for hit in located]}))
"""


def test_a_cuda_cells_repair_on_a_windows_host_vendors_from_cuda_path_and_oneapi_under_wine(
    host: str, tmp_path: Path
) -> None:
    """The prefix laid out as a Windows CUDA build machine's (`--cuda-path 12.8`: CUDA_PATH_V12_8\\bin holding the
    DLLs of NVIDIA's nvidia-cuda-runtime-cu12 and nvidia-cuda-nvrtc-cu12 win_amd64 wheels, ONEAPI_ROOT's mkl and
    compiler folders those of the mkl and intel-openmp wheels): the repair of the Windows CUDA FIXTURE wheel (not
    torch: tests/cuda_win_fixture.py) vendors NVIDIA's files from that folder, unchanged, and no provider wheel."""
    variant = VARIANTS["12.8"]
    wheel = build_wheel(variant, tmp_path, torch_plan("win-64", "12.8", "3.11", variant.torch).root.wheel, ())
    script = tmp_path / "repair.py"
    script.write_text(REPAIR_ON_THE_WINDOWS_SIDE, encoding="utf-8")
    ran = wine_host("python", "--cuda-path", "12.8", "--", wine.windows_path(script), wine.windows_path(wheel),
                    wine.windows_path(tmp_path), variant.torch)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    answer = json.loads(ran.stdout.strip().splitlines()[-1])
    print(answer["message"])  # the repair's line, for docs/windows-host-wine.md (pytest -rP shows it)
    bin_dir = f"{CUDA_HOME}\\bin"
    assert answer["status"] == "passed", answer["message"]
    assert answer["message"].startswith(
        f"delvewheel --ignore-existing --no-mangle-all: vendored {variant.nvrtc} ({bin_dir}), {variant.cudart} "
        f"({bin_dir}), {variant.builtins} ({bin_dir}) into "
    ), answer["message"]
    assert answer["mkl"] == [
        ["mkl_core.2.dll", "C:\\Program Files (x86)\\Intel\\oneAPI\\mkl\\latest\\bin"],
        ["libiomp5md.dll", "C:\\Program Files (x86)\\Intel\\oneAPI\\compiler\\latest\\bin"],
    ]
    assert not (tmp_path / "cache" / "dll-providers").exists(), "a provider wheel was fetched"
    with zipfile.ZipFile(wine.host_path(answer["wheel"])) as archive:
        vendored = {PurePosixPath(n).name: archive.read(n) for n in archive.namelist() if n.startswith("torch.libs/")}
    originals = {}  # the DLLs of the nvidia-* wheels the fixture pins by sha256
    for nvidia in variant.wheels:
        target = pip.target_args("3.11", None, ["win_amd64"])
        root = downloads.requirement_libraries(nvidia.as_requirement(), target, CACHE, tmp_path / "fetch.log")
        originals.update({PurePosixPath(m).name: (root / m).read_bytes() for m in nvidia.dlls})
    assert sorted(vendored) == sorted([variant.cudart, variant.nvrtc, variant.builtins])
    assert all(data == originals[name] for name, data in vendored.items()), "not NVIDIA's files as they are"


def test_the_quick_tests_of_under_wine_txt_pass_under_wine(host: str) -> None:
    """tests/under_wine.txt's files with pytest in the host (python.exe -m pytest under Wine); what cannot run
    there skips with its reason."""
    ran = wine_host("pytest", "--", "-q", "-rs")
    out = ran.stdout.replace("\r\n", "\n")
    print(out[-3000:])  # the skips and their reasons (pytest -rP shows them)
    assert ran.returncode == 0, out[-4000:] + ran.stderr
    assert out.rstrip().endswith("pytest under Wine 8.0 (CPython 3.11.9 embeddable): exit 0")
    assert " passed" in out and " failed" not in out
