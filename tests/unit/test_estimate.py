"""`python pipeline.py matrix --estimate`: runner hours per night from the per-cell estimates in the data."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import ROOT
from torchbuild.commands import estimate
from torchbuild.errors import UserError
from torchbuild.knowledge import ci_estimates


def pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_the_data_has_its_source_and_githubs_minute_multipliers() -> None:
    table = ci_estimates.load_table()
    assert "About billing for GitHub Actions" in table.source
    assert table.runners["windows-2022"].minute_multiplier == 2
    assert table.runners["ubuntu-latest"].minute_multiplier == 1
    assert not table.runners["self-hosted"].billed
    assert table.hosted_job_limit_hours == 6
    win_cuda, uncertain = table.build_hours[("win-64", "cuda")]
    assert 3 <= win_cuda <= 4 and uncertain


def test_estimate_of_the_default_matrix_adds_up() -> None:
    result = pipeline("matrix", "--estimate")
    assert result.returncode == 0, result.stderr
    table = ci_estimates.load_table()
    rows = re.findall(r"^(\S+-py3\.\d+)\s+(\S+)\s+([\d.]+)( ~)?$", result.stdout, re.M)
    ids = pipeline("matrix").stdout.split()
    assert [r[0] for r in rows] == [i for i in ids if re.fullmatch(r"(win|linux)-64-\S+-py3\.\d+", i)]
    for cell, runner, hours, mark in rows:
        platform = cell.split("-cpu")[0].split("-cuda")[0]
        hours_in_data, uncertain = table.build_hours[(platform, "cpu" if "-cpu-" in cell else "cuda")]
        assert float(hours) == hours_in_data and bool(mark) == uncertain
        assert runner == ("windows-2022" if platform == "win-64" else "ubuntu-latest")
    overhead = table.overhead_jobs * table.overhead_hours_per_job
    windows = sum(float(h) for _, r, h, _ in rows if r == "windows-2022")
    linux = sum(float(h) for _, r, h, _ in rows if r == "ubuntu-latest") + overhead
    assert f"total: {len(rows)} cells, {windows + linux:.1f} hosted runner-hours per night" in result.stdout
    billed = round(linux * 60 * 1 + windows * 60 * 2)
    assert f"= {billed} minutes per night" in result.stdout
    assert "Windows 2x" in result.stdout and "public repositories: standard runners are free" in result.stdout
    assert "~ = uncertain estimate" in result.stdout


def test_estimate_of_another_matrix_file(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text('platforms: [win-64]\ncuda: ["12.6"]\npython: ["3.12"]\n', encoding="utf-8")
    result = pipeline("matrix", "--estimate", "--matrix", str(path))
    assert result.returncode == 0, result.stderr
    table = ci_estimates.load_table()
    hours = table.build_hours[("win-64", "cuda")][0]
    overhead = table.overhead_jobs * table.overhead_hours_per_job
    assert "total: 1 cells" in result.stdout
    assert f"= {round(hours * 120 + overhead * 60)} minutes per night" in result.stdout
    assert f"plus {table.smoke_hours:.2f} h of GPU smoke jobs on self-hosted runners" in result.stdout


CELL = {"cell": "win-64-cuda12.8-py3.12", "platform": "win-64", "cuda": "12.8", "python": "3.12", "runs-on": ""}


def test_a_cell_over_the_hosted_job_limit_is_flagged() -> None:
    table = ci_estimates.load_table()
    slow = replace(table, build_hours={**table.build_hours, ("win-64", "cuda"): (7.5, True)})
    text = estimate.render(estimate.estimate([{**CELL, "runs-on": "windows-2022"}], slow))
    assert "warning: win-64-cuda12.8-py3.12 needs ~7.5 h, over the 6 h limit" in text


def test_unknown_runner_and_malformed_table_are_named() -> None:
    with pytest.raises(UserError, match=r"no runner 'macos-14' \(cell win-64-cuda12.8-py3.12\); it has windows-2022"):
        estimate.estimate([{**CELL, "runs-on": "macos-14"}])
    with pytest.raises(UserError, match=r"ci_estimates.yaml: malformed estimate table \(KeyError"):
        ci_estimates.parse_table({"runners": {}}, "ci_estimates.yaml")
