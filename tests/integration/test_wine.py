"""win-64 artifacts run for real on this Linux host: under Wine, with python.org's embeddable CPython for Windows,
the VC runtime native-only (a wheel without it fails as on a clean Windows machine).

- the loader check (verify's TB205) on small real DLLs (mingw-w64): an export that is missing is named with error 127;
- PyPI's torch wheel as PyPI ships it (no VC runtime): the smoke stage fails with torch's own message (WinError 126)
  and Wine's loader names msvcp140.dll; the loader check names msvcp140.dll too;
- two (release, Python) pairs end to end, `python pipeline.py --platform win-64 ...`, the smoke under Wine included:
  one 1.x release (1.13.1, the last 1.x, on Python 3.10) and the newest 2.x here on Python 3.13.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.conftest import REPODATA, ROOT
from tests.pe_fixtures import PeFixtures
from torchbuild.config.options import RunOptions
from torchbuild.errors import StageFailed
from torchbuild.results import Artifact
from torchbuild.stages import Context, smoke_wheel
from torchbuild.stages.source import fetch
from torchbuild.stages.verify.loader import loader_checks

CACHE = RunOptions().cache_dir
pytestmark = pytest.mark.usefixtures("needs_wine")


def test_loader_check_names_a_missing_export_with_windows_error_127(pe_fixtures: PeFixtures, tmp_path: Path) -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.5.1")
    files = {"torch/__init__.py": b"", "torch/lib/old.dll": pe_fixtures.old.read_bytes(),
             "torch/lib/newer.dll": pe_fixtures.newer.read_bytes()}  # fmt: skip
    wheel = make_wheel(tmp_path, "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl", files)
    (check,) = loader_checks(plan, wheel, None, tmp_path / "work", CACHE, tmp_path / "loadcheck.log")
    assert check.code == "TB205" and check.status == "failed"
    assert check.message == (
        "torch/lib/newer.dll: error 127 (The specified procedure could not be found): missing old.dll.bar (imported "
        "by torch/lib/newer.dll); Wine loads it with the import unresolved; Windows fails the load"
    )


@pytest.fixture(scope="module")
def upstream_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PyPI's torch 2.14.1 cp311 win_amd64 wheel as PyPI ships it: without the VC runtime."""
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    return fetch(plan, CACHE, tmp_path_factory.mktemp("fetch") / "pip.log", version=plan.torch).path


@pytest.mark.slow
def test_a_wheel_without_the_vc_runtime_fails_smoke_with_torchs_message_and_wines_loader_names_msvcp140(
    upstream_wheel: Path, tmp_path: Path
) -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    inputs = {"repaired_wheel": Artifact.of(upstream_wheel)}
    ctx = Context(plan=plan, root=tmp_path, options=RunOptions(), inputs=inputs)
    with pytest.raises(StageFailed) as caught:
        smoke_wheel.run(ctx)
    message = str(caught.value)
    first = message.splitlines()[0]
    assert first.startswith(
        "smoke-wheel: wheel: import failed in a fresh embeddable CPython under Wine 8.0, CPython 3.11.9 embeddable "
        f"with {upstream_wheel.name}: OSError: [WinError 126]"
    ), message
    assert "c10.dll" in first
    assert "[Wine's loader: MSVCP140.dll (needed by Lib/site-packages/torch/lib/c10.dll) not found" in first
    statuses = {c.name: c.status for c in caught.value.checks}
    assert statuses["wheel: install"] == "passed"
    assert statuses["wheel: import"] == "failed"


@pytest.mark.slow
def test_the_loader_check_names_msvcp140_in_a_wheel_without_the_vc_runtime(
    upstream_wheel: Path, tmp_path: Path
) -> None:
    plan = torch_plan("win-64", "cpu", "3.11", "2.14.1")
    (check,) = loader_checks(plan, upstream_wheel, None, tmp_path, CACHE, tmp_path / "loadcheck.log")
    assert check.status == "failed"
    assert check.message.startswith(
        "torch/lib/c10.dll: error 126 (The specified module could not be found): missing msvcp140.dll (needed by "
        "torch/lib/c10.dll)"
    ), check.message
    assert (
        "torch/_C.cp311-win_amd64.pyd: error 126 (The specified module could not be found): missing msvcp140.dll "
        "(needed by torch/lib/c10.dll, torch/lib/torch_cpu.dll"
    ) in check.message


# One 1.x and one recent 2.x release; bench/corpus.py runs the rest (every Windows release from 1.8.0, each Python).
# The newest release runs in every CI run; the old era's pair in the nightly (about 5 minutes each on 2 cores).
PAIRS = [
    pytest.param("1.13.1", "3.10", "3.10.11", marks=pytest.mark.nightly, id="1.13.1-py3.10"),
    pytest.param("2.14.1", "3.13", "3.13.2", id="2.14.1-py3.13"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("release", "python", "cpython"), PAIRS)
def test_a_real_release_passes_every_stage_with_the_smoke_under_wine(
    release: str, python: str, cpython: str, tmp_path: Path
) -> None:
    argv = [sys.executable, str(ROOT / "pipeline.py"), "--platform", "win-64", "--cuda", "cpu", "--py", python,
            "--torch", release, "--matrix", str(ROOT / "matrix.yaml"), "--repodata", str(REPODATA),
            "--compression-level", "1", "--packages", "torch"]  # fmt: skip  (companions: test_windows.py)
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    where = f"under Wine 8.0, CPython {cpython} embeddable"
    lines = output.splitlines()
    report = json.loads((tmp_path / "build" / "report.json").read_text())
    # the conda environment also runs its console script's launcher (Scripts/torchrun.exe --help)
    for kind, counts, described in (("wheel", "12/16", "a fresh embeddable CPython"),
                                    ("conda", "13/17", "the conda layout")):  # fmt: skip
        smoke_line = next(line for line in lines if line.startswith(f"✓ smoke-{kind}"))
        assert f"{counts} checks passed {where} in {described}" in smoke_line
        compile_skip = "torch.compile (checked on Linux hosts, as upstream does; this is Windows under Wine"
        assert f"{kind}: {compile_skip}" in smoke_line
        assert f"{kind}: c++ consumer (no MSVC here, Windows under Wine" in smoke_line
        stage = next(s for s in report["cells"][0]["stages"] if s["stage"] == f"smoke-{kind}")
        assert stage["ran_on"] == where
        scripts = next(c["message"] for c in stage["checks"] if c["name"] == f"{kind}: console scripts")
        assert "torchrun" in scripts.split("; ")[0], scripts  # torch.distributed.run imports under Wine
        # 1.13.1's caffe2 converters need protobuf, click and onnx, undeclared (packaging.yaml broken_console_scripts)
        assert ("convert-caffe2-to-onnx (caffe2.python" in scripts) == release.startswith("1."), scripts
        assert f"- win-64-cpu-py{python}-torch{release} / smoke-{kind}: passed {where}" in (
            (tmp_path / "build" / "report.md").read_text()
        )
    assert f'<property name="ran_on" value="{where}" />' in (tmp_path / "build" / "junit.xml").read_text()
    verify = {c["code"]: c for c in stage_checks(report, "verify")}
    assert verify["TB205"]["status"] == "passed" and verify["TB108"]["status"] == "passed"
    assert (tmp_path / "channel" / "win-64" / f"pytorch-{release}-py{python}_cpu_0.conda").is_file()


def stage_checks(report: dict[str, object], name: str) -> list[dict[str, str]]:
    cells = report["cells"]
    assert isinstance(cells, list)
    stage = next(s for s in cells[0]["stages"] if s["stage"] == name)
    return list(stage["checks"])
