"""The pin step for a cell's companions (torchbuild/pin/pin_companions.py): the newest release of the paired series
that the configured package indexes offer, asked of uv against real local wheel folders (pip sees only them), said
in the plan line, refused where a named companion has none, and replayed from the build's record by the smoke job."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import make_wheel
from torchbuild.config.matrix import Cell, Matrix
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.knowledge import compat, pairing
from torchbuild.pin import pin, pin_companions
from torchbuild.plan import resolve
from torchbuild.run import runner

CELL = Cell(platform="win-64", cuda="cpu", python="3.11", torch="2.14.1")
TAG = "cp311-cp311-win_amd64"
TAKEN = "0.29.2 pairs; the indexes offer up to 0.29.1: taken"


def target(torch: str, platform: str = "win-64", local: str = "cpu") -> pairing.Target:
    return pairing.Target(platform=platform, python="3.11", torch_release=torch, torch_version=f"{torch}+{local}",
                          local_version=local)  # fmt: skip


def test_the_candidates_are_the_paired_release_then_the_older_ones_of_its_series_that_admit_the_torch() -> None:
    assert pairing.candidates("torchvision", target("2.14.1")) == ("0.29.2", "0.29.1")  # 0.29.0 pins ==2.14.0
    assert pairing.candidates("torchvision", target("2.14.0")) == ("0.29.0",)  # 0.29.1/0.29.2 are newer than 0.29.0
    assert pairing.candidates("torchvision", target("2.5.1")) == ("0.20.1",)  # 0.20.0 pins ==2.5.0
    assert pairing.candidates("torchaudio", target("2.14.1")) == ("2.11.0",)  # measured beside it (companions.yaml)
    assert pairing.candidates("torchaudio", target("2.13.0")) == ()  # none pairs
    assert pairing.candidates("torchvision", target("2.13.0", "linux-64")) == ()  # PyPI's is a CUDA build


@pytest.fixture()
def links(pip_sees_only: Path) -> Path:
    """pip (and so uv) sees only this folder (tests/conftest.py), and no answer of an earlier test is kept."""
    pin_companions._offered.cache_clear()
    return pip_sees_only


def offered(links: Path, tmp_path: Path, *versions: str, packages: tuple[str, ...] | None = None) -> dict[str, object]:
    for version in versions:
        make_wheel(links, f"torchvision-{version}-{TAG}.whl", {"torchvision/__init__.py": b""})
    make_wheel(links, f"torchaudio-2.11.0-{TAG}.whl", {"torchaudio/__init__.py": b""})  # its pair, offered
    torch = compat.load().release("2.14.1")
    assert torch is not None
    options = RunOptions(cache_dir=tmp_path / "cache")
    return dict(pin_companions.offered(CELL, torch, Matrix(packages=packages), options, compat.load()))


def test_the_paired_release_offered_changes_nothing(links: Path, tmp_path: Path) -> None:
    assert offered(links, tmp_path, "0.29.1", "0.29.2") == {}
    assert (tmp_path / "cache" / pin_companions.MEMO).is_file()  # the answer is kept for the next run


def test_an_older_release_of_the_series_is_taken_and_the_plan_line_says_so(links: Path, tmp_path: Path) -> None:
    found = offered(links, tmp_path, "0.29.0", "0.29.1")  # 0.29.0 pins torch==2.14.0: never a candidate
    assert found == {"torchvision": pairing.Offered(release="0.29.1", note=TAKEN)}
    plan = resolve(CELL, Matrix(), offered=found)  # type: ignore[arg-type]
    vision = plan.companions[0]
    assert (vision.release, vision.wheel) == ("0.29.1", "torchvision-0.29.1-cp311-cp311-win_amd64.whl")
    assert vision.line == (
        "torchvision 0.29.1: paired (requires torch>=2.14.0; PyPI's torchvision-0.29.1-cp311-cp311-win_amd64.whl; "
        f"{TAKEN}), the stages build torchvision-0.29.1-py3.11_cpu_0.conda, which requires pytorch 2.14.1 py3.11_cpu_0"
    )


def test_none_offered_is_not_shipped_by_default_and_refused_when_named(links: Path, tmp_path: Path) -> None:
    found = offered(links, tmp_path, "0.28.0")
    note = found["torchvision"].note  # type: ignore[attr-defined]
    assert note.startswith(
        "the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, constraints) offer no torchvision "
        "wheel of 0.29.2 or 0.29.1 for cp311-cp311-win_amd64 (the releases that ship with torch 2.14.1)"
    )
    vision = resolve(CELL, Matrix(), offered=found).companions[0]  # type: ignore[arg-type]
    assert vision.line == f"torchvision: not shipped: {note}"
    with pytest.raises(UserError, match=r"torchvision cannot ship with torch 2.14.1\+cpu .* offer no torchvision"):
        resolve(CELL, Matrix(packages=("torch", "torchvision")), offered=found)  # type: ignore[arg-type]


def test_a_companion_named_with_its_release_is_not_asked_about(links: Path, tmp_path: Path) -> None:
    assert offered(links, tmp_path, packages=("torch", "torchvision==0.29.0")) == {}


def test_the_smoke_job_resolves_the_recorded_choice_whatever_its_indexes_offer(links: Path, tmp_path: Path) -> None:
    found = offered(links, tmp_path, "0.29.1")
    plan = resolve(CELL, Matrix(), offered=found)  # type: ignore[arg-type]
    runner.State(tmp_path / plan.work_dir / "state.json").save(plan)
    again = pin.pin_to_record(CELL, Matrix(), tmp_path)
    assert again.to_dict() == plan.to_dict()
    assert again.companions[0].release == "0.29.1"
