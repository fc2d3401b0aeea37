"""A fourth package beside torch needs data and no stage module of its own (issue 41): ``torchfixture``, a tiny
extension package whose ``_C.so`` links torch's ``libc10.so``, is added to a linux-64 CPU cell's Plan as one more
entry (the data a release of it would have in companions.yaml: its wheel, sha256, conda file stem and pins) and goes
through every stage of the real runner: the source stage takes its wheel by the sha256 the data pins, the repair
leaves libc10.so to torch, the conda stage packages it pinning the cell's exact pytorch build, verify checks that
package beside torch's (TB111, TB112) and publish puts both into the channel.

torch here is a small real wheel of the Plan's name holding only ``torch/lib/libc10.so`` (a real torch wheel costs
minutes per stage on 2 cores), so the two smoke stages, which import torch and run its operators, are replaced by
fakes that pass: nothing real can import this torch."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from tests.builders import make_wheel, torch_plan
from tests.conftest import REPODATA
from torchbuild.config.options import RunOptions
from torchbuild.config.pairing import Companion
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


def _fake_smoke(ctx: Context) -> StageResult:
    return StageResult(message="fake: this torch holds only libc10.so, nothing real can import it")


def test_a_fourth_package_goes_through_every_stage_with_data_alone(tmp_path: Path) -> None:
    build = tmp_path / "gcc"
    libc10 = _shared_object(build, "libc10", "int c10_answer(void) { return 42; }\n")
    extension = _shared_object(build, "_C", "int c10_answer(void);\nint answer(void) { return c10_answer(); }\n",
                               f"-L{build}", "-lc10")  # fmt: skip
    cell = torch_plan("linux-64", "cpu", "3.11", "2.13.0")
    torch = make_wheel(tmp_path / "given", cell.wheel, {"torch/__init__.py": b"", "torch/lib/libc10.so": libc10})
    fixture = make_wheel(tmp_path / "pypi", WHEEL, {f"{NAME}/__init__.py": b"", f"{NAME}/_C.so": extension},
                         requires=["torch==2.13.0"])  # fmt: skip
    cache = tmp_path / "cache"
    sha256 = sha256_of(fixture)
    (cache / "wheels" / sha256).mkdir(parents=True)
    (cache / "wheels" / sha256 / WHEEL).write_bytes(fixture.read_bytes())  # as the source stage keeps what it fetched
    pin = f"pytorch 2.13.0 {cell.conda.build_string}"
    python = next(d for d in cell.conda.depends if d.split()[0] == "python")
    entry = Companion(name=NAME, release="0.1.0", requested=True, paired="0.1.0", wheel=WHEEL, sha256=sha256,
                      package=f"{NAME}-0.1.0-{cell.conda.build_string}", depends=(python, pin))  # fmt: skip
    plan = dataclasses.replace(cell, companions=(entry,))
    assert [p.name for p in plan.packages] == ["torch", NAME]

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
    conda = f"{NAME}-0.1.0-{cell.conda.build_string}.conda"
    assert f"{conda}: " in records["conda"].message and f"depends on {python}, {pin}" in records["conda"].message
    verified = {c.code: c for c in records["verify"].checks if c.code in ("TB111", "TB112")}
    assert {code: c.status for code, c in verified.items()} == {"TB111": "passed", "TB112": "passed"}
    assert "from torch's package: libc10.so" in verified["TB112"].message
    channel = tmp_path / plan.channel
    index = json.loads((channel / "linux-64" / "repodata.json").read_text())
    assert f"pytorch ==2.13.0 {cell.conda.build_string}" in index["packages.conda"][conda]["depends"]
    assert (channel / "whl" / "simple" / NAME / WHEEL).is_file()
