"""The per-cell setting ``declared_libraries: keep | vendor`` (issue 24): through matrix.yaml (top level, include
entries) and ``--declared-libraries``, into the Plan, and said in one line per declared library; bad values and
vendoring on linux-64 CUDA cells refused before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.commands.plan_view import declared_lines
from torchbuild.config import matrix
from torchbuild.config.matrix import Cell, MatrixError
from torchbuild.errors import UserError
from torchbuild.knowledge import cuda_wheels, datafiles
from torchbuild.plan import resolve
from torchbuild.run import state
from torchbuild.wheel.wheelfile import without_requirements

WIN_231 = ("--platform", "win-64", "--cuda", "cpu", "--py", "3.12", "--torch", "2.3.1")
CELL_231 = Cell(platform="win-64", cuda="cpu", python="3.12", torch="2.3.1")
MATRIX_231 = "platforms: [win-64]\ncuda: [cpu]\npython: ['3.12']\ntorch: '2.3.1'\n"
ID_231 = "win-64-cpu-py3.12-torch2.3.1"


def pipeline(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_the_default_is_upstreams_keep_and_the_plan_says_where_mkl_comes_from() -> None:
    plan = resolve(CELL_231, matrix.parse("platforms: [win-64]\n"))
    assert (plan.declared_choice.choice, plan.declared_choice.upstream) == ("keep", "keep")
    assert [w.name for w in plan.declared_libraries] == ["mkl", "intel-openmp", "tbb"]
    assert plan.vendored_libraries == ()
    assert "mkl" in plan.conda.provided_dlls.values()  # the conda package leaves MKL's DLLs to the mkl package
    mkl = declared_lines(plan)[0]
    assert mkl.startswith("mkl (libimalloc.dll, mkl_avx.1.dll, mkl_avx2.1.dll, ...; 33 files): ")
    assert mkl.endswith("left to the requirement mkl<=2021.4.0,>=2021.1.1 (mkl==2021.4.0) (keep, upstream's choice)")


def test_vendor_moves_the_requirements_out_of_what_is_left_to_them() -> None:
    (cell,) = matrix.parse(MATRIX_231 + "declared_libraries: vendor\n").cells()
    plan = resolve(cell, matrix.parse(MATRIX_231))
    assert plan.declared_choice.choice == "vendor"
    assert plan.declared_libraries == ()
    assert [w.name for w in plan.vendored_libraries] == ["mkl", "intel-openmp", "tbb"]
    assert "mkl" not in plan.conda.provided_dlls.values()  # the package keeps the vendored MKL DLLs
    # and torch\lib\libiomp5md.dll, which torch preloads and the vendored mkl_intel_thread loads by name
    assert "intel-openmp" not in plan.conda.provided_dlls.values()
    assert not any(d.split()[0] == "mkl" for d in plan.root.conda.depends)
    line = declared_lines(plan)[0]
    assert "vendored into the wheel from mkl-2021.4.0-py2.py3-none-win_amd64.whl" in line
    assert line.endswith("requirement mkl<=2021.4.0,>=2021.1.1 (mkl==2021.4.0) dropped (vendor; upstream keeps them)")
    # MKL's CPU kernels, which mkl_core.1.dll loads by name, come with the Plan (cuda_wheels.yaml)
    loads = dict(plan.vendored_libraries[0].loaded_by_name)
    assert loads["mkl_intel_thread.1.dll"] == ("mkl_core.1.dll", "libiomp5md.dll")
    assert {"mkl_def.1.dll", "mkl_avx2.1.dll", "mkl_vml_avx2.1.dll"} <= set(loads["mkl_core.1.dll"])


def test_an_include_entry_sets_one_cell_over_the_matrix() -> None:
    m = matrix.parse(
        "platforms: [win-64]\ncuda: [cpu]\npython: ['3.12']\ntorch: '2.3.1'\ndeclared_libraries: keep\n"
        "include:\n  - {platform: win-64, cuda: cpu, python: '3.12', declared_libraries: vendor}\n"
    )
    (cell,) = m.cells()  # the include entry sets the matrix's cell, it does not add a second one of its point
    assert (cell.id, cell.declared_libraries) == (f"{ID_231}-vendor", "vendor")
    assert resolve(cell, m).declared_choice.choice == "vendor"
    # --declared-libraries is over both, and re-ids the cell
    (flagged,) = matrix.with_declared_libraries(m.cells(), "keep")
    assert flagged.id == ID_231
    assert resolve(flagged, m).declared_choice.choice == "keep"
    # an include entry of the matrix's setting is the matrix's cell again; one of the other setting replaces it
    again = matrix.parse(MATRIX_231 + "declared_libraries: vendor\ninclude:\n  - {platform: win-64, cuda: cpu, "
                         "python: '3.12'}\n")  # fmt: skip
    assert [c.id for c in again.cells()] == [f"{ID_231}-vendor"]
    back = matrix.parse(MATRIX_231 + "declared_libraries: vendor\ninclude:\n  - {platform: win-64, cuda: cpu, "
                        "python: '3.12', declared_libraries: keep}\n")  # fmt: skip
    assert [c.id for c in back.cells()] == [ID_231]


@pytest.mark.parametrize(
    ("setting", "cell_id"),
    [("", ID_231), ("declared_libraries: keep\n", ID_231), ("declared_libraries: vendor\n", f"{ID_231}-vendor")],
)
def test_a_vendoring_cell_carries_it_in_its_id_and_keep_or_unset_do_not(setting: str, cell_id: str) -> None:
    (cell,) = matrix.parse(MATRIX_231 + setting).cells()
    assert cell.id == cell_id
    assert cell.point_id == ID_231


def test_the_ids_without_a_suffix_are_upstreams_choice_keep_on_every_platform() -> None:
    # An unset cell takes upstream's choice and its id has no suffix: that id means keep only while upstream keeps.
    assert dict(cuda_wheels.load().upstream_choice) == {"linux-64": "keep", "win-64": "keep"}


def test_an_upstream_choice_that_is_neither_keep_nor_vendor_is_refused_naming_both() -> None:
    raw = datafiles.raw(cuda_wheels.DATA_FILE)
    changed = {**raw, "declared_libraries": {**raw["declared_libraries"], "upstream": {"win-64": "vendored"}}}
    with pytest.raises(UserError) as refused:
        cuda_wheels._parse(changed)
    assert str(refused.value) == (
        "torchbuild/data/cuda_wheels.yaml: declared_libraries.upstream.win-64 'vendored' is not one of keep or vendor."
    )


def test_a_vendoring_run_has_a_work_dir_and_state_of_its_own() -> None:
    m = matrix.parse(MATRIX_231)
    (keep,) = m.cells()
    (vendor,) = matrix.with_declared_libraries(m.cells(), "vendor")
    kept, vendored = resolve(keep, m), resolve(vendor, m)
    assert (kept.cell_id, kept.work_dir) == (ID_231, f"build/{ID_231}")
    assert (vendored.cell_id, vendored.work_dir) == (f"{ID_231}-vendor", f"build/{ID_231}-vendor")
    assert vendored.stage_dirs["repair"] == f"build/{ID_231}-vendor/repair"
    root = Path("/workspace")
    assert state.path_of(root, kept.work_dir) != state.path_of(root, vendored.work_dir)


def test_the_vendor_id_selects_the_cell_everywhere(tmp_path: Path) -> None:
    """As the nightly does (`matrix --github`, then --only <its cell>), and for a cell the matrix keeps: <id>-vendor
    selects it vendoring, the id a --declared-libraries vendor run of it got."""
    file = tmp_path / "matrix.yaml"
    file.write_text(MATRIX_231 + "include:\n  - {platform: win-64, cuda: cpu, python: '3.11', torch: '2.3.1', "
                    "declared_libraries: vendor}\n", encoding="utf-8")  # fmt: skip
    listed = pipeline("matrix", "--github", "--matrix", str(file), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    vendor_311 = "win-64-cpu-py3.11-torch2.3.1-vendor"
    assert [e["cell"] for e in json.loads(listed.stdout)["include"]] == [ID_231, vendor_311]
    for only, choice in ((vendor_311, "vendor"), (f"{ID_231}-vendor", "vendor"), (ID_231, "keep")):
        run = pipeline("plan", "--json", "--matrix", str(file), "--only", only, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        (plan,) = json.loads(run.stdout)
        assert (plan["cell_id"], plan["work_dir"], plan["declared_choice"]["choice"]) == (only, f"build/{only}", choice)
    flagged = pipeline("plan", "--json", *WIN_231, "--declared-libraries", "vendor", cwd=tmp_path)
    assert json.loads(flagged.stdout)[0]["cell_id"] == f"{ID_231}-vendor", flagged.stderr
    unknown = pipeline("plan", "--matrix", str(file), "--only", "win-64-cpu-py3.12-vendor", cwd=tmp_path)
    assert unknown.returncode == 2
    assert f"No cell 'win-64-cpu-py3.12-vendor' in {file}. Valid cell ids: {ID_231} or {vendor_311}" in unknown.stderr
    assert list(tmp_path.iterdir()) == [file]  # plan writes nothing


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("declared_libraries: bundle\n", "matrix.yaml:1: declared_libraries 'bundle' is not one of keep or vendor"),
        (
            "include:\n  - {platform: win-64, cuda: cpu, python: '3.12', declared_libraries: Vendor}\n",
            "matrix.yaml:2: declared_libraries 'Vendor' is not one of keep or vendor",
        ),
        ("exclude:\n  - {cuda: cpu, declared_libraries: keep}\n", "unknown key 'declared_libraries'"),
    ],
)
def test_bad_matrix_values_name_keep_and_vendor(text: str, message: str) -> None:
    with pytest.raises(MatrixError, match=message):
        matrix.parse(text)


def test_a_bad_flag_value_exits_2_naming_the_choices_and_writes_nothing(tmp_path: Path) -> None:
    run = pipeline(*WIN_231, "--declared-libraries", "bundled", cwd=tmp_path)
    assert run.returncode == 2
    assert "error: --declared-libraries 'bundled' is not one of keep or vendor" in run.stderr
    assert "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_vendor_is_refused_for_linux_cuda_cells_before_anything_runs(tmp_path: Path) -> None:
    run = pipeline("--platform", "linux-64", "--cuda", "12.8", "--py", "3.11", "--declared-libraries", "vendor",
                   cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2, run.stderr
    said = " ".join(run.stderr.split())
    assert "declared_libraries 'vendor' is refused for linux-64 (CUDA 12.8)" in said
    assert "The valid choice there is 'keep'" in said
    assert list(tmp_path.iterdir()) == []
    # the Plan of a release whose wheel declares nvidia-* names them
    with pytest.raises(UserError, match=r"refused for linux-64 \(nvidia-cuda-nvrtc-cu12==12.8.93, "):
        resolve(Cell(platform="linux-64", cuda="12.8", python="3.11", torch="2.10.0", declared_libraries="vendor"),
                matrix.parse("platforms: [linux-64]\n"))  # fmt: skip
    # a linux CPU cell has nothing to vendor: the setting is said, not refused
    cpu = resolve(Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0", declared_libraries="vendor"),
                  matrix.parse("platforms: [linux-64]\n"))  # fmt: skip
    assert declared_lines(cpu) == ["- (the wheel declares no requirement that installs libraries)"]


def test_plan_prints_one_line_per_declared_library(tmp_path: Path) -> None:
    keep = pipeline("plan", *WIN_231, cwd=tmp_path)
    vendor = pipeline("plan", *WIN_231, "--declared-libraries", "vendor", cwd=tmp_path)
    assert keep.returncode == vendor.returncode == 0, keep.stderr + vendor.stderr
    kept = [" ".join(line.split()) for line in keep.stdout.splitlines() if "declared library" in line]
    assert len(kept) == 3 and all(line.endswith("(keep, upstream's choice)") for line in kept)
    assert "left to conda deps intel-openmp, mkl, ucrt" in " ".join(keep.stdout.split())
    vendored = [" ".join(line.split()) for line in vendor.stdout.splitlines() if "declared library" in line]
    assert len(vendored) == 3 and all("vendored into the wheel from" in line for line in vendored)
    assert "left to conda deps ucrt, vc14_runtime" in " ".join(vendor.stdout.split())


def test_dropping_a_requirement_keeps_every_other_byte_of_metadata() -> None:
    metadata = (
        b"Metadata-Version: 2.1\nName: torch\nRequires-Dist: filelock\n"
        b'Requires-Dist: mkl (<=2021.4.0,>=2021.1.1) ; platform_system == "Windows"\nRequires-Dist: mkl-service\n'
        b"\nRequires-Dist: mkl in the description stays\n"
    )
    text, dropped = without_requirements(metadata, ["mkl"])
    assert dropped == ['mkl (<=2021.4.0,>=2021.1.1) ; platform_system == "Windows"']
    assert text == metadata.replace(b'Requires-Dist: mkl (<=2021.4.0,>=2021.1.1) ; platform_system == "Windows"\n', b"")
