"""A fourth package beside torch needs data and no code of its own (issue 41): ``torchfixture``, a tiny extension
package whose ``_C.so`` links torch's ``libc10.so``, is one more entry of a copy of companions.yaml (``packages:``,
its release with its wheel's sha256, a column of ``pairs``) that stands in for the installed one
(``TORCHBUILD_DATA``, knowledge/datafiles.py). The Plan of a linux-64 CPU cell resolved from that data ships it, and it
goes through every stage of the real runner: the source stage takes its wheel by the sha256 the data pins, the repair
leaves libc10.so to torch, the conda stage packages it pinning the cell's exact pytorch build, verify checks that
package beside torch's (TB111, TB112) and publish puts both into the channel.

torch here is a small real wheel of the Plan's name holding only ``torch/lib/libc10.so`` (a real torch wheel costs
minutes per stage on 2 cores), so the two smoke stages, which import torch and run its operators, are replaced by
fakes that pass: nothing real can import this torch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.builders import make_wheel, torch_plan
from tests.conftest import REPODATA
from torchbuild.conda.archive import read_package
from torchbuild.config.options import RunOptions
from torchbuild.knowledge import companions, datafiles
from torchbuild.results import StageResult, sha256_of
from torchbuild.run.runner import run_cell
from torchbuild.stages import Context

NAME = "torchfixture"
TAG = "cp311-cp311-manylinux_2_28_x86_64"
WHEEL = f"{NAME}-0.1.0-{TAG}.whl"


def _shared_object(directory: Path, name: str, source: str, *link: str) -> bytes:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.c").write_text(source)
    out = directory / f"{name}.so"
    argv = ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{name}.so", "-o", str(out), str(directory / f"{name}.c")]
    subprocess.run([*argv, *link], check=True)
    return out.read_bytes()


def _data_with_the_fixture(folder: Path, sha256: str) -> Path:
    """A copy of the installed companions.yaml with ``torchfixture`` added as data alone: its package entry, its
    release 0.1.0 (PyPI-style linux-64 CPU wheel for Python 3.11, pinned by sha256), paired with torch 2.13.0."""
    data = datafiles.raw(companions.DATA_FILE)
    data = {**data, "packages": {**data["packages"], NAME: {"repository": "https://github.com/example/torchfixture",
                                                            "built_on": ["linux-64"]}}}  # fmt: skip
    build = {"requires_torch": "==2.13.0", "build": "cpu", "wheels": {"3.11": [WHEEL, sha256]}}
    data[NAME] = {"0.1.0": {"linux-64": build}}
    data["pairs"] = {
        torch: {**row, NAME: {"release": "0.1.0", "by": "metadata: its wheels pin this torch exactly"}
                if torch == "2.13.0" else {"none": "torchfixture pairs with torch 2.13.0 only"}}
        for torch, row in data["pairs"].items()
    }  # fmt: skip
    folder.mkdir(parents=True)
    (folder / companions.DATA_FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


def _fake_smoke(ctx: Context) -> StageResult:
    return StageResult(message="fake: this torch holds only libc10.so, nothing real can import it")


def test_a_fourth_package_goes_through_every_stage_with_data_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "gcc"
    libc10 = _shared_object(build, "libc10", "int c10_answer(void) { return 42; }\n")
    extension = _shared_object(build, "_C", "int c10_answer(void);\nint answer(void) { return c10_answer(); }\n",
                               f"-L{build}", "-lc10")  # fmt: skip
    fixture = make_wheel(tmp_path / "pypi", WHEEL, {f"{NAME}/__init__.py": b"", f"{NAME}/_C.so": extension},
                         requires=["torch==2.13.0"])  # fmt: skip
    cache = tmp_path / "cache"
    sha256 = sha256_of(fixture)
    (cache / "wheels" / sha256).mkdir(parents=True)
    (cache / "wheels" / sha256 / WHEEL).write_bytes(fixture.read_bytes())  # as the source stage keeps what it fetched
    monkeypatch.setenv(datafiles.STAND_INS, str(_data_with_the_fixture(tmp_path / "data", sha256)))
    plan = torch_plan("linux-64", "cpu", "3.11", "2.13.0")
    torch = make_wheel(tmp_path / "given", plan.root.wheel, {"torch/__init__.py": b"", "torch/lib/libc10.so": libc10})
    pin = f"pytorch 2.13.0 {plan.root.conda.build_string}"
    python = next(d for d in plan.root.conda.depends if d.split()[0] == "python")
    assert [p.name for p in plan.packages] == ["torch", NAME]
    assert plan.packages[-1].repository == "https://github.com/example/torchfixture"  # its conda about.home
    assert plan.companions[-1].line == (
        f"{NAME} 0.1.0: paired (requires torch==2.13.0; PyPI's {WHEEL}), the stages build "
        f"{NAME}-0.1.0-{plan.root.conda.build_string}.conda, which requires {pin}"
    )

    options = RunOptions(wheel=torch, cache_dir=cache, repodata=REPODATA, compression_level=1)
    fakes = {"smoke-wheel": _fake_smoke, "smoke-conda": _fake_smoke}
    done = run_cell(plan, tmp_path, options, fakes)
    records = {r.stage: r for r in done.records}
    assert {s: r.status for s, r in records.items() if r.status not in ("passed", "skipped")} == {}, {
        s: r.message for s, r in records.items()
    }
    assert f"beside it {WHEEL}" in records["source"].message
    repaired = records["repair"].message[records["repair"].message.index(f"{WHEEL}: auditwheel") :]
    assert "left to torch: libc10.so" in repaired
    conda = f"{NAME}-0.1.0-{plan.root.conda.build_string}.conda"
    assert f"{conda}: " in records["conda"].message and f"depends on {python}, {pin}" in records["conda"].message
    made = read_package(tmp_path / plan.stage_dirs["conda"] / NAME / conda, payload=False)
    about = json.loads(made.info["info/about.json"])
    assert about["home"] == "https://github.com/example/torchfixture"  # its repository, from the data
    verified = {c.code: c for c in records["verify"].checks if c.code in ("TB111", "TB112")}
    assert {code: c.status for code, c in verified.items()} == {"TB111": "passed", "TB112": "passed"}
    assert "from torch's package: libc10.so" in verified["TB112"].message
    channel = tmp_path / plan.channel
    index = json.loads((channel / "linux-64" / "repodata.json").read_text())
    assert f"pytorch ==2.13.0 {plan.root.conda.build_string}" in index["packages.conda"][conda]["depends"]
    assert (channel / "whl" / "simple" / NAME / WHEEL).is_file()
