"""torchvision and torchaudio beside torch: the table (torchbuild/data/companions.yaml), what a cell's Plan says of
each companion, and what is refused. The slow test holds the table's claim about PyPI's linux torchvision against
the real wheel."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from torchbuild.config import matrix as matrix_mod
from torchbuild.config.matrix import Cell, Matrix, MatrixError
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.host import pip
from torchbuild.knowledge import companions, compat, datafiles
from torchbuild.knowledge.pairing import NOT_BUILT, Target, choose
from torchbuild.plan import resolve

ROOT = Path(__file__).resolve().parents[2]

# The installed data's packages section, which every table names (a table without it is refused first).
PACKAGES = datafiles.raw(companions.DATA_FILE)["packages"]


def target(platform: str, torch: str, local: str, python: str = "3.11") -> Target:
    return Target(platform=platform, python=python, torch_release=torch, torch_version=f"{torch}+{local}",
                  local_version=local)  # fmt: skip


def by_name(found: tuple[object, ...]) -> dict[str, object]:
    return {c.name: c for c in found}  # type: ignore[attr-defined]


def test_every_torch_release_has_a_row_and_each_pair_admits_its_torch() -> None:
    table = companions.load()
    releases = [r.version for r in compat.load().releases]
    assert sorted(table.pairs) == sorted(releases)
    for torch, row in table.pairs.items():
        for name in table.names:
            pair = row[name]
            assert pair.release or pair.none, (torch, name)
            if pair.release:
                for build in table.releases[name][pair.release].builds.values():
                    assert build.admits(torch), (torch, name, pair.release, build.platform, build.requires_torch)


def test_linux_cpu_cell_ships_neither_companion_and_says_why() -> None:
    found = by_name(choose(None, target("linux-64", "2.13.0", "cpu")))
    vision, audio = found["torchvision"], found["torchaudio"]
    assert vision.release is None and audio.release is None  # type: ignore[attr-defined]
    assert vision.line == (  # type: ignore[attr-defined]
        "torchvision: not shipped: PyPI's linux-64 wheel of torchvision 0.28.0 is a CUDA 13.0 build (+cu130) linking "
        "libc10_cuda.so, libcudart.so.13, libtorch_cuda.so, which this cell's CPU torch does not have (it fails at "
        "import), and PyPI has no CPU build of it; to ship one, name a checkout the stages compile against this "
        "cell's torch: packages: {torchvision: {git_ref: v0.28.0}} in matrix.yaml, --companion-ref "
        "torchvision=v0.28.0 (from https://github.com/pytorch/vision), or --companion-source torchvision=DIR"
    )
    assert "no torchaudio release pins or names torch 2.13.0: the newest, 2.11.0" in audio.line  # type: ignore[attr-defined]


def test_an_old_linux_cpu_cell_gets_the_cpu_build_pypi_had() -> None:
    """torchaudio 0.7.0's linux wheel links libtorch_cpu.so only: it loads beside a CPU torch 1.7.0."""
    found = by_name(choose(None, target("linux-64", "1.7.0", "cpu", python="3.8")))
    assert found["torchaudio"].release == "0.7.0"  # type: ignore[attr-defined]
    assert found["torchaudio"].wheel == "torchaudio-0.7.0-cp38-cp38-manylinux1_x86_64.whl"  # type: ignore[attr-defined]
    assert "libtorch_cuda.so" in found["torchvision"].reason  # type: ignore[attr-defined]  # 0.8.1 is a CUDA build


def test_a_yanked_wheel_is_paired_and_says_so() -> None:
    """PyPI yanked every torchvision 0.2.x wheel (pure Python, the torch 1.0 era's): pip installs it pinned exactly."""
    vision = by_name(choose(None, target("linux-64", "1.0.1", "cpu", python="3.7")))["torchvision"]
    assert vision.line == (  # type: ignore[attr-defined]
        "torchvision 0.2.2.post3: paired (declares no torch requirement; PyPI's "
        "torchvision-0.2.2.post3-py2.py3-none-any.whl, yanked there: So that users won't accidentally install this "
        f"when using python 3.11), {NOT_BUILT}"
    )


def test_win_cpu_and_linux_cuda_cells_pair_pypis_wheel_and_say_it_is_not_built() -> None:
    win = by_name(choose(None, target("win-64", "2.13.0", "cpu")))["torchvision"]
    assert (win.release, win.wheel, win.sha256) == (  # type: ignore[attr-defined]
        "0.28.0",
        "torchvision-0.28.0-cp311-cp311-win_amd64.whl",
        "9a45ea67235d965ef52187130d20002a4de20c54ea3d927a24286961d268dc37",
    )
    assert win.line == (  # type: ignore[attr-defined]
        "torchvision 0.28.0: paired (requires torch==2.13.0; PyPI's torchvision-0.28.0-cp311-cp311-win_amd64.whl), "
        f"{NOT_BUILT}"
    )
    linux = by_name(choose(None, target("linux-64", "2.13.0", "cu130")))["torchvision"]
    assert linux.wheel == "torchvision-0.28.0-cp311-cp311-manylinux_2_28_x86_64.whl"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (target("linux-64", "2.13.0", "cu128"), "is a CUDA 13.0 build (+cu130) linking libcudart.so.13; this cell's "
         "torch is +cu128 (its CUDA runtime must be the cell's"),
        (target("win-64", "2.9.1", "cu126"), "is a CPU build (+cpu): beside this cell's CUDA torch its CUDA operators"),
        (target("win-64", "2.13.0", "cpu", python="3.9"), "PyPI has no Python 3.9 wheel of torchvision 0.28.0 for "
         "win-64 (it has 3.10, 3.11, 3.12, 3.13, 3.14 or 3.14t)"),
    ],
)  # fmt: skip
def test_a_companion_of_another_build_or_python_is_not_shipped(t: Target, expected: str) -> None:
    vision = by_name(choose(None, t))["torchvision"]
    assert vision.release is None and expected in vision.reason  # type: ignore[attr-defined]


def test_a_named_companion_that_cannot_ship_is_refused_naming_the_library_or_both_versions() -> None:
    with pytest.raises(UserError, match=r"linking libc10_cuda.so, libcudart.so.13, libtorch_cuda.so") as cuda:
        choose(("torch", "torchvision"), target("linux-64", "2.13.0", "cpu"))
    assert "Leave torchvision out of packages (matrix.yaml or --packages)" in str(cuda.value)
    with pytest.raises(UserError) as pin:
        choose(("torch", "torchvision==0.27.0"), target("win-64", "2.13.0", "cpu"))
    assert (
        "torchvision 0.27.0 requires torch==2.12.0 (its wheels' Requires-Dist); this cell's torch is 2.13.0+cpu; "
        "torchvision 0.28.0 is the release that pairs with torch 2.13.0"
    ) in str(pin.value)


def test_packages_chooses_which_companions_a_cell_has() -> None:
    assert [c.name for c in choose(("torch",), target("win-64", "2.13.0", "cpu"))] == []
    chosen = choose(("torch", "torchvision==0.29.1"), target("win-64", "2.14.1", "cpu"))
    assert [(c.name, c.release) for c in chosen] == [("torchvision", "0.29.1")]


def test_the_plan_carries_the_companions() -> None:
    plan = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.13.0"), Matrix())
    assert [(c.name, c.release) for c in plan.companions] == [("torchvision", "0.28.0"), ("torchaudio", None)]
    assert plan.to_dict()["companions"][0]["wheel"] == "torchvision-0.28.0-cp311-cp311-win_amd64.whl"


def test_a_win_64_plan_builds_torchvision_pinned_to_its_exact_pytorch_build() -> None:
    """win-64: torchvision and torchaudio are built from PyPI's wheels beside torch, each conda package requiring the
    cell's pytorch version AND build string (linux-64 CUDA cells: below)."""
    plan = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.3.1"), Matrix())
    vision, audio = plan.companions
    assert vision.built and vision.package == "torchvision-0.18.1-py3.11_cpu_0"
    assert vision.depends == ("python >=3.11,<3.12.0a0", "pytorch 2.3.1 py3.11_cpu_0")
    assert vision.line == (
        "torchvision 0.18.1: paired (requires torch==2.3.1; PyPI's torchvision-0.18.1-cp311-cp311-win_amd64.whl), "
        "the stages build torchvision-0.18.1-py3.11_cpu_0.conda, which requires pytorch 2.3.1 py3.11_cpu_0"
    )
    assert audio.built and audio.package == "torchaudio-2.3.1-py3.11_cpu_0" and audio.depends == vision.depends


def test_a_companion_that_brings_a_second_openmp_runtime_is_left_out_and_refused_when_named() -> None:
    """torch 2.5.1's DLLs import libiomp5md.dll, torchaudio 2.5.1's libtorchaudio.pyd vcomp140.dll (companions.yaml,
    read from both wheels): asked for by default, torchaudio is not shipped, saying why; named, the run is refused
    before anything is written."""
    cell = Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.5.1")
    vision, audio = resolve(cell, Matrix()).companions
    assert vision.built and audio.release is None
    assert audio.line == (
        "torchaudio: not shipped: PyPI's win-64 wheel of torchaudio 2.5.1 imports vcomp140.dll and torch 2.5.1's "
        "imports libiomp5md.dll (torchbuild/data/companions.yaml, read from both wheels): `import torch, torchaudio` "
        "would load two OpenMP runtimes into one process (verify's TB114 stops such a cell)"
    )
    with pytest.raises(UserError) as info:
        resolve(cell, Matrix(packages=("torch", "torchaudio")))
    assert str(info.value).startswith(
        "torchaudio cannot ship with torch 2.5.1+cpu (win-64, Python 3.11): PyPI's win-64 wheel of torchaudio 2.5.1 "
        "imports vcomp140.dll and torch 2.5.1's imports libiomp5md.dll"
    )
    # torch 2.11.0 with torchaudio 2.11.0, which imports no OpenMP runtime: shipped
    newer = resolve(dataclasses.replace(cell, torch="2.11.0"), Matrix())
    assert [(c.name, c.release, c.built) for c in newer.companions] == [
        ("torchvision", "0.26.0", True), ("torchaudio", "2.11.0", True)
    ]


def test_a_bad_openmp_entry_is_refused_naming_the_row() -> None:
    with pytest.raises(UserError) as info:
        companions._parse({"packages": PACKAGES, "torchaudio": {"2.5.1": {"win-64": {"openmp": ["vcomp140"]}}}})
    assert str(info.value) == (
        "torchbuild/data/companions.yaml: torchaudio 2.5.1 win-64 openmp: 'vcomp140' is not a DLL name (give e.g. "
        "vcomp140.dll)"
    )


def test_a_linux_cuda_plan_builds_pypis_cuda_companions_pinned_to_its_exact_pytorch_build() -> None:
    """linux-64 CUDA 12.8, torch 2.10.0: PyPI's linux torchvision 0.25.0 and torchaudio 2.10.0 are its CUDA 12.8
    builds (+cu128, linking libcudart.so.12): both built, each pinning the cell's exact pytorch cuda build."""
    plan = resolve(Cell(platform="linux-64", cuda="12.8", python="3.11", torch="2.10.0"), Matrix())
    vision, audio = plan.companions
    pin = "pytorch 2.10.0 py3.11_cuda12.8_cudnn9_0"
    assert (vision.release, vision.build) == ("0.25.0", "cu128")
    assert vision.package == "torchvision-0.25.0-py3.11_cuda12.8_cudnn9_0"
    assert vision.wheel == "torchvision-0.25.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert vision.depends == ("python >=3.11,<3.12.0a0", pin) and audio.depends == vision.depends
    assert audio.built and audio.package == "torchaudio-2.10.0-py3.11_cuda12.8_cudnn9_0"
    assert audio.line.endswith(f"build torchaudio-2.10.0-py3.11_cuda12.8_cudnn9_0.conda, which requires {pin}")


@pytest.mark.parametrize(
    ("cuda", "local", "message"),
    [
        ("13.0", "cu130", "torchvision 0.25.0 is a CUDA 12.8 build (+cu128) linking libcudart.so.12; this cell's torch "
         "is +cu130 (its CUDA runtime must be the cell's, two CUDA runtimes cannot serve one process)"),
        ("cpu", "cpu", "torchvision 0.25.0 is a CUDA 12.8 build (+cu128) linking libc10_cuda.so, libcudart.so.12, "
         "libtorch_cuda.so, which this cell's CPU torch does not have"),
    ],
)  # fmt: skip
def test_a_linux_companion_of_another_cuda_is_refused_naming_its_cuda_runtime(
    cuda: str, local: str, message: str
) -> None:
    with pytest.raises(UserError) as refused:
        choose(("torch", "torchvision"), target("linux-64", "2.10.0", local))
    assert message in str(refused.value), cuda
    assert "Leave torchvision out of packages" in str(refused.value)
    asked_by_default = by_name(choose(None, target("linux-64", "2.10.0", local)))
    assert all(c.release is None and "PyPI's linux-64 wheel" in c.reason for c in asked_by_default.values())  # type: ignore[attr-defined]


def test_a_linux_companion_whose_pin_is_not_the_cells_torch_is_refused_naming_both_versions() -> None:
    with pytest.raises(UserError) as refused:
        choose(("torch", "torchaudio==2.9.1"), target("linux-64", "2.10.0", "cu128"))
    assert ("torchaudio 2.9.1 requires torch==2.9.1 (its wheels' Requires-Dist); this cell's torch is 2.10.0+cu128; "
            "torchaudio 2.10.0 is the release that pairs with torch 2.10.0") in str(refused.value)  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("packages: [torch, torchvison]\n", "matrix.yaml:1: packages: 'torchvison' is not a package a cell ships. "
         "Did you mean 'torchvision'? Give torch, torchvision or torchaudio"),
        ("packages: [torchvision]\n", "matrix.yaml:1: packages: packages must include torch"),
        ("packages: [torch, torchvision, torchvision==0.28.0]\n", "torchvision is named more than once"),
        ("packages: [torch, torchvision==0.99.0]\n", "torchvision 0.99.0 is not a release torchbuild/data/"
         "companions.yaml knows; the newest are 0.29.2"),
        ("packages: [torch==2.13.0]\n", "torch's release is chosen by 'torch:' (or --torch), not in packages"),
        ("packages: torch\n", "'packages' must be a list"),
    ],
)  # fmt: skip
def test_bad_packages_are_named_with_line_and_the_valid_choices(text: str, message: str) -> None:
    with pytest.raises(MatrixError) as info:
        matrix_mod.parse(text)
    assert message in str(info.value)


def test_packages_default_to_every_companion_that_pairs() -> None:
    assert matrix_mod.parse("torch: latest\n").packages is None
    assert matrix_mod.parse("packages: [torch, torchaudio]\n").packages == ("torch", "torchaudio")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"torchvision": {"1.0": {"win-64": {"requires_torch": "=>2"}}}}, "torchvision 1.0 win-64: requires_torch"),
        ({"torchvision": {"1.0": {"win-64": {"wheels": {"3.11": ["a.whl", "nohex"]}}}}}, "wheels 3.11: give [file"),
        ({"pairs": {"2.0.0": {"torchvision": {"release": "9.9"}, "torchaudio": {"none": "x"}}}},
         "pairs 2.0.0 torchvision: release 9.9 has no entry"),
        ({"pairs": {"2.0.0": {"torchvision": {"none": "x"}}}}, "pairs 2.0.0: names no torchaudio"),
        ({"packages": {"torchvision": {"built_on": []}}}, "packages torchvision: give its repository (https://...)"),
        ({"packages": {"torchvision": {"repository": "https://x", "not_built": {"linux-64 gpu": "why"}}}},
         "packages torchvision not_built: give {'<platform> cpu' or '<platform> cuda': why}"),
        ({"packages": None}, "packages: give {name: {repository: URL, built_on: [platforms]}}"),
    ],
)  # fmt: skip
def test_a_broken_table_is_refused_naming_the_row(raw: dict[str, object], message: str) -> None:
    with pytest.raises(UserError) as info:
        companions._parse({"packages": PACKAGES, **raw})
    assert str(info.value).startswith("torchbuild/data/companions.yaml: ") and message in str(info.value)


@pytest.mark.slow  # downloads PyPI's torchvision 0.28.0 linux wheel (7.7 MB) once into the cache
def test_the_table_says_what_pypis_linux_torchvision_links(tmp_path: Path) -> None:
    build = companions.load().release("torchvision", "0.28.0").builds["linux-64"]
    wheel = build.wheels["3.11"]
    dest = RunOptions().cache_dir / "wheels" / "companions"
    target = pip.target_args("3.11", "cp311", ["manylinux_2_28_x86_64"])
    (fetched,) = pip.download(["torchvision==0.28.0"], dest, log=tmp_path / "pip.log", target=target)
    assert fetched.path.name == wheel.file
    assert hashlib.sha256(fetched.path.read_bytes()).hexdigest() == wheel.sha256
    from torchbuild.platforms.linux.elf import read_elf

    with zipfile.ZipFile(fetched.path) as archive:
        archive.extract("torchvision/_C.so", tmp_path)
        version = archive.read("torchvision/version.py").decode()
    needed = read_elf(tmp_path / "torchvision" / "_C.so", "torchvision/_C.so").needed
    assert build.links is not None and set(build.links) <= set(needed)
    assert "libtorch_cuda.so" in needed and f"+{build.label}'" in version


def test_a_built_companion_without_its_package_is_reported_not_built_in_this_run(tmp_path: Path) -> None:
    """A default companion whose wheel could not be fetched (the source stage leaves it out, saying why): the report
    does not call it built."""
    from torchbuild.results import Artifact
    from torchbuild.run.report import companion_line

    vision = resolve(Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.5.1"), Matrix()).companions[0]
    status, line = companion_line(vision, {})
    assert status == "not built"
    assert line.endswith("; not built in this run (no package: see the stages' messages above)")
    package = tmp_path / "torchvision-0.20.1-py3.11_cpu_0.conda"
    package.write_bytes(b"x")
    assert companion_line(vision, {"conda_package[torchvision]": Artifact.of(package)}) == ("built", vision.line)


def test_a_linux_cpu_plan_builds_no_companion_and_says_why_in_one_line_each() -> None:
    """Latest (no CUDA build of a companion fits a CPU torch) and torch 1.7.0, whose torchaudio 0.7.0 is a CPU build
    on PyPI: paired, but the stages build linux-64 companions for CUDA cells only, and say so."""
    latest = resolve(Cell(platform="linux-64", cuda="cpu", python="3.11", torch="2.13.0"), Matrix())
    assert [c.built for c in latest.companions] == [False, False]
    assert all(c.line.count("\n") == 0 and "not shipped" in c.line for c in latest.companions)
    old = resolve(Cell(platform="linux-64", cuda="cpu", python="3.8", torch="1.7.0"), Matrix())
    audio = next(c for c in old.companions if c.name == "torchaudio")
    assert not audio.built and audio.line.endswith(
        "not built yet: the stages build linux-64 companions for CUDA cells only (PyPI's CPU builds are of old "
        "releases)"
    )


def test_a_file_in_torchbuild_data_stands_in_for_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TORCHBUILD_DATA: its companions.yaml is read instead of the installed one (one package fewer here), and
    a broken one is refused naming that file."""
    raw = datafiles.raw(companions.DATA_FILE)
    (tmp_path / companions.DATA_FILE).write_text(
        yaml.safe_dump({**raw, "packages": {"torchvision": raw["packages"]["torchvision"]}})
    )
    monkeypatch.setenv(datafiles.STAND_INS, str(tmp_path))
    assert companions.companion_names() == ("torchvision",)
    with pytest.raises(UserError) as info:
        companions.parse_package("torchaudio")
    assert "Give torch or torchvision, a companion" in str(info.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / companions.DATA_FILE).write_text("packages: [\n")
    monkeypatch.setenv(datafiles.STAND_INS, str(broken))
    with pytest.raises(UserError) as info:
        companions.load()
    assert str(info.value).startswith(f"{broken / companions.DATA_FILE} is not valid YAML: ")
    monkeypatch.delenv(datafiles.STAND_INS)
    assert companions.companion_names() == ("torchvision", "torchaudio")


def test_a_torchbuild_data_that_is_no_folder_is_refused_by_name(tmp_path: Path) -> None:
    # Before: a mistyped folder was ignored without a word and the installed data read instead.
    env = {**os.environ, datafiles.STAND_INS: str(tmp_path / "no-such-folder")}
    result = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "plan", "--cuda", "cpu", "--py", "3.11"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert result.returncode == 2
    assert f"TORCHBUILD_DATA={tmp_path / 'no-such-folder'} is not a folder" in result.stderr
    assert "Traceback" not in result.stderr
