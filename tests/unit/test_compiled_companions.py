"""A companion compiled from a checkout against the cell's torch (issue 55), before anything runs: how a user names
the checkout (matrix.yaml ``packages`` as a mapping, --companion-source, --companion-ref), the version the pin step
reads from it, the Plan entry the stages build it from, where it is published (beside its torch: a nightly's in the
nightly places), what a prebuilt companion beside a nightly torch is told, and its build environment on Windows from
recorded inputs (vswhere/vcvarsall output), as torch's is (test_toolchain_msvc.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import companion_fixture as fixture
from tests.conftest import ROOT
from torchbuild.channels import conda_path, wheel_path
from torchbuild.config import matrix, package_sources
from torchbuild.config.build_version import OwnBuild
from torchbuild.config.matrix import Cell, MatrixError
from torchbuild.config.matrix_schema import PackageSource
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.knowledge import pairing
from torchbuild.pin import companion_checkouts
from torchbuild.plan import Plan, resolve
from torchbuild.platforms.toolchain import Requirement
from torchbuild.platforms.windows import msvc
from torchbuild.run.state import State
from torchbuild.stages.build import companion
from torchbuild.stages.build.activate import Activation
from torchbuild.stages.build.stage import build_environment
from torchbuild.stages.smoke.resources import smoke_checks

TOOLCHAIN = Path(__file__).resolve().parent.parent / "data" / "toolchain"


def load(text: str, folder: Path) -> matrix.Matrix:
    (folder / "matrix.yaml").write_text(text, encoding="utf-8")
    return matrix.load(folder / "matrix.yaml")


# --- what the user says ----------------------------------------------------------------------------------


def test_packages_as_a_mapping_name_the_checkouts_each_cell_compiles(tmp_path: Path) -> None:
    found = load("packages:\n  torchvision: {git_ref: v0.28.0}\n  torchaudio:\n", tmp_path)
    assert found.packages == ("torch", "torchvision", "torchaudio")
    assert found.source_of("torchvision") == PackageSource(git_ref="v0.28.0")
    assert found.source_of("torchaudio") is None  # null: the paired release, as in the list form
    mine = load("packages: {torchvision: {source_dir: src/vision, build_version: 0.28.0a0+mine}}\n", tmp_path)
    assert mine.source_of("torchvision") == PackageSource(source_dir=str(tmp_path / "src" / "vision"),
                                                          build_version="0.28.0a0+mine")  # fmt: skip
    pinned = load("packages: {torchvision: 0.28.0}\n", tmp_path)
    assert pinned.packages == ("torch", "torchvision==0.28.0") and pinned.package_sources == ()


def test_the_branch_nightly_names_visions_and_audios_branches_beside_torchs(tmp_path: Path) -> None:
    found = load("torch: {git_ref: main, build_version: nightly}\n"
                 "packages: {torchvision: {git_ref: main}, torchaudio: {git_ref: main}}\n", tmp_path)  # fmt: skip
    assert found.source is not None and (found.source.git_ref, found.source.build_version) == ("main", "nightly")
    assert dict(found.package_sources) == {"torchvision": PackageSource(git_ref="main"),
                                           "torchaudio": PackageSource(git_ref="main")}  # fmt: skip
    nightly = (ROOT / ".github" / "workflows" / "nightly.yml").read_text(encoding="utf-8")
    assert "--companion-ref torchvision=main --companion-ref torchaudio=main" in nightly


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("packages: {torchvision: {git_ref: main, source_dir: x}}\n",
         "matrix.yaml:1: packages: torchvision: give one of git_ref"),
        ("packages: {torchvision: {build_version: 1.0.0}}\n", "give one of git_ref (a tag, branch or commit"),
        ("packages: {torchvision: {git_url: https://x/y, source_dir: x}}\n", "git_url names the repository git_ref"),
        ("packages: {torchvision: {git_reff: main}}\n", "unknown key 'git_reff'. Did you mean 'git_ref'?"),
        ("packages: {torch: {git_ref: main}}\n", "torch's source is the top-level 'torch:'"),
        ("packages: {torchvison: {git_ref: main}}\n", "'torchvison' is not a package a cell ships. Did you mean"),
        ("packages: {torchvision: {git_ref: main, build_version: nightly-ish}}\n", "is not a PEP 440 version"),
    ],
)
def test_a_bad_checkout_entry_is_refused_naming_the_line_and_the_valid_choices(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(MatrixError) as err:
        load(text, tmp_path)
    assert said in str(err.value)


def test_the_command_line_names_checkouts_and_ships_them(tmp_path: Path) -> None:
    given = package_sources.from_command_line([f"torchvision={tmp_path}"], ["torchaudio=v2.11.0"])
    assert given == (("torchvision", PackageSource(source_dir=str(tmp_path))),
                     ("torchaudio", PackageSource(git_ref="v2.11.0")))  # fmt: skip
    listed = matrix.with_package_sources(matrix.Matrix(packages=("torch", "torchvision==0.28.0")), given)
    assert listed.packages == ("torch", "torchvision", "torchaudio")  # the checkout replaces the pinned release
    for flags, said in [
        (([f"torchvison={tmp_path}"], []), "--companion-source torchvison="),
        (([], ["torchvision"]), "give NAME=REF, NAME one of torchvision or torchaudio"),
        (([str(tmp_path / "none")], []), "give NAME=DIR"),
        (([f"torchvision={tmp_path / 'none'}"], []), "no such directory"),
        (([f"torchvision={tmp_path}"], ["torchvision=main"]), "torchvision is given a checkout twice"),
    ]:
        with pytest.raises(UserError, match=said):
            package_sources.from_command_line(*flags)


# --- the version a checkout's wheel carries, and the Plan --------------------------------------------------


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHBUILD_DATA", str(fixture.data(tmp_path / "data")))
    return tmp_path


def with_source(folder: Path, **source: str) -> matrix.Matrix:
    return matrix.Matrix(package_sources=((fixture.NAME, PackageSource(**source)),))


def test_a_checkouts_version_is_version_txt_and_its_commit_or_torchs_night(data: Path) -> None:
    src, head = fixture.checkout(data / "src")
    options = RunOptions(cache_dir=data / "cache")
    read = companion_checkouts.read(with_source(data, source_dir=str(src)), options, None, "cpu")
    checkout = read[fixture.NAME]
    assert checkout.version == f"0.1.0a0+{head[:7]}"  # as torchvision's setup.py: version.txt + "+" + sha7
    assert checkout.origin == f"--companion-source {fixture.NAME}={src} (version.txt 0.1.0a0, HEAD {head[:7]})"
    night = OwnBuild(version="2.14.0.dev20251105", origin="--git-ref main", facts="")
    nightly = companion_checkouts.read(with_source(data, source_dir=str(src)), options, night, "cpu")
    assert nightly[fixture.NAME].version == "0.1.0.dev20251105+cpu"  # a nightly of torch's night, as upstream's
    given = with_source(data, source_dir=str(src), build_version="0.1.0.dev20990101")
    with pytest.raises(UserError, match=r"is a nightly version, and this cell's torch is not a nightly: a package is "
                                        r"published where its torch is"):  # fmt: skip
        companion_checkouts.read(given, options, None, "cpu")
    with pytest.raises(UserError, match=r"no version\.txt, so this is no checkout of visionfixture"):
        companion_checkouts.read(with_source(data, source_dir=str(data)), options, None, "cpu")


def plan_with(data: Path, version: str, platform: str = "linux-64", own: OwnBuild | None = None) -> Plan:
    checkout = pairing.Checkout(origin="--companion-source visionfixture=/src", version=version, source_dir="/src")
    cell = Cell(platform=platform, cuda="cpu", python="3.11", torch="2.13.0")
    return resolve(cell, matrix.load(ROOT / "matrix.yaml"), pinned="2.13.0", own=own,
                   compiled={fixture.NAME: checkout})  # fmt: skip


def test_the_plan_entry_of_a_compiled_companion_pins_the_cells_exact_torch(data: Path) -> None:
    plan = plan_with(data, "0.1.0a0+1a2b3c4")
    entry = plan.packages[-1]
    assert entry.name == fixture.NAME and entry.links_against == ("torch",)
    assert entry.build is not None and entry.build.env == {"BUILD_VERSION": "0.1.0a0+1a2b3c4",
                                                           "PYTORCH_VERSION": "2.13.0+cpu"}  # fmt: skip
    assert entry.conda.filename == "visionfixture-0.1.0a0-py3.11_cpu_1a2b3c4_0.conda"
    assert entry.conda.depends == ("python >=3.11,<3.12.0a0", "pytorch 2.13.0 py3.11_cpu_0")
    line = next(c.line for c in plan.companions if c.name == fixture.NAME)
    assert line == ("visionfixture 0.1.0a0+1a2b3c4: compiled from --companion-source visionfixture=/src against "
                    "this cell's torch, the stages build visionfixture-0.1.0a0-py3.11_cpu_1a2b3c4_0.conda, which "
                    "requires pytorch 2.13.0 py3.11_cpu_0")  # fmt: skip
    assert json.loads(plan.to_json())["packages"][-1]["build"]["version"] == "0.1.0a0+1a2b3c4"


def test_a_nightlys_compiled_companion_goes_where_its_torch_goes(data: Path) -> None:
    own = OwnBuild(version="2.13.0.dev20251105", origin="--git-ref main", facts="")
    plan = plan_with(data, "0.1.0.dev20251105+cpu", own=own)
    torch, entry = plan.root, plan.packages[-1]
    assert entry.conda.depends[-1] == "pytorch 2.13.0.dev20251105 py3.11_cpu_0"
    assert conda_path("linux-64", torch.conda.filename).startswith("label/nightly/linux-64/")
    assert conda_path("linux-64", entry.conda.filename) == \
        "label/nightly/linux-64/visionfixture-0.1.0.dev20251105-py3.11_cpu_0.conda"  # fmt: skip
    assert wheel_path(entry.wheel).startswith("whl/nightly/simple/visionfixture/")
    assert wheel_path(torch.wheel).startswith("whl/nightly/simple/torch/")


def test_a_prebuilt_companion_beside_a_nightly_torch_is_not_shipped_and_says_how_to_ship_one() -> None:
    """Before: PyPI's torchvision 0.29.2 shipped beside torch 2.15.0.dev20261120, into the releases' places."""
    cell = Cell(platform="win-64", cuda="cpu", python="3.12")
    own = OwnBuild(version="2.15.0.dev20261120+cpu", origin="--wheel torch-2.15.0.dev20261120+cpu-...", facts="")
    plan = resolve(cell, matrix.load(ROOT / "matrix.yaml"), pinned="2.15.0", own=own)
    assert [p.name for p in plan.packages] == ["torch"]
    vision = next(c for c in plan.companions if c.name == "torchvision")
    assert vision.release is None
    assert vision.reason.startswith("this cell's torch is a nightly (2.15.0.dev20261120+cpu): PyPI's win-64 wheel "
                                    "of torchvision 0.29.2 was built against a release of torch")  # fmt: skip
    assert "--companion-ref torchvision=v0.29.2" in vision.reason
    named = matrix.Matrix(packages=("torch", "torchvision"))
    with pytest.raises(UserError, match=r"torchvision cannot ship with torch 2\.15\.0\.dev20261120"):
        resolve(cell, named, pinned="2.15.0", own=own)


# --- the build environment, on Windows from recorded inputs ----------------------------------------------


def recorded_activation() -> Activation:
    """What activate.py finds on the Windows host the recordings come from: vcvarsall's variables (the delta of its
    `set` dump, tests/data/toolchain) and the Plan's Python."""
    before = json.loads((TOOLCHAIN / "vcvars-before.json").read_text(encoding="utf-8"))
    after = msvc.parse_set_output((TOOLCHAIN / "vcvarsall-x64-14.39.txt").read_text(encoding="utf-8"))
    found = (Requirement("MSVC 14.39", True, "14.39.33519"), Requirement("Python 3.11", True, "C:\\Python311"))
    return Activation(found, msvc.env_delta(before, after), None, r"C:\Python311\python.exe")


def test_a_win64_companion_compiles_with_the_msvc_torch_compiles_with_and_its_own_variables(data: Path) -> None:
    plan = plan_with(data, "0.1.0a0+1a2b3c4", platform="win-64")
    entry = plan.packages[-1]
    before = json.loads((TOOLCHAIN / "vcvars-before.json").read_text(encoding="utf-8"))
    roots = {dep.name: data / "deps" / dep.name for dep in plan.build_deps}  # MKL's headers, where a run fetches them
    torch_env, _notes = build_environment(plan, recorded_activation(), roots, before, sccache=False)
    env = companion.environment(torch_env, entry)
    assert env["PATH"].startswith(r"C:\Program Files\Microsoft Visual Studio\2022\Enterprise\VC\Tools\MSVC")
    assert env["VCTOOLSVERSION"] == "14.39.33519" and "INCLUDE" in env and "LIB" in env
    assert env["DISTUTILS_USE_SDK"] == "1"  # setuptools takes the activated MSVC, not one it finds itself
    assert (env["BUILD_VERSION"], env["PYTORCH_VERSION"]) == ("0.1.0a0+1a2b3c4", "2.13.0+cpu")
    assert env["MAX_JOBS"] == plan.env["MAX_JOBS"]
    assert companion.build_command(Path("env/Scripts/python.exe"), Path("dist"))[1:5] == ["-m", "pip", "wheel", "."]


def test_the_build_environment_takes_the_checkouts_build_requirements_but_torch(tmp_path: Path) -> None:
    assert companion.requirements(fixture.SOURCE) == ["pip", "setuptools>=61", "wheel"]
    assert companion.requirements(tmp_path) == ["pip", "setuptools>=40.8.0", "wheel"]  # PEP 518's default


def test_a_companion_without_checks_of_its_own_gets_the_import_check() -> None:
    assert "companion import" in smoke_checks.check_names([fixture.NAME])
    assert "companion import" not in smoke_checks.check_names(["torchvision", "torchaudio"])
    assert "companion import" not in smoke_checks.check_names([])


def test_the_smoke_job_replays_the_compiled_companions_the_build_job_recorded(data: Path) -> None:
    """``pipeline.py smoke`` on another machine, without the checkout: the Plan from build/<cell>/state.json."""
    plan = plan_with(data, "0.1.0a0+1a2b3c4")
    State(data / "state.json").save(plan)
    recorded = companion_checkouts.recorded(data / "state.json")
    assert recorded == {fixture.NAME: pairing.Checkout(origin="--companion-source visionfixture=/src",
                                                       version="0.1.0a0+1a2b3c4", source_dir="/src")}  # fmt: skip
    cell = Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0")
    again = resolve(cell, matrix.load(ROOT / "matrix.yaml"), pinned="2.13.0", compiled=recorded)
    assert again.packages == plan.packages
