"""The nightly's history, as its readers see it: ``pipeline.py history HISTORY_DIR`` on nights whose report.json the
pipeline's own report writer made (tests/nights.py). Since when a cell has been red, a night that did not build a
cell, a night whose report cannot be read (said, not a crash), the trends' numbers; the page in headless Chromium
(no console error, the grid and the charts drawn, a screenshot kept); and the nightly's own night report
(``scripts/ci_summary.py --history``) read back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import torch_plan
from tests.chromium import shown
from tests.conftest import ROOT
from tests.nights import Outcome, write_night
from torchbuild.run import history, report_html

A, B, C = torch_plan(python="3.11"), torch_plan(python="3.12"), torch_plan(platform="win-64", python="3.12")
SCREENSHOT = ROOT / "build" / "test-output" / "history.png"  # build/ is ignored by git


def pipeline(*args: str, cwd: Path, encoding: str = "utf-8") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": encoding}
    return subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *args], cwd=cwd, capture_output=True,
                          text=True, encoding=encoding, check=False, timeout=120, env=env)  # fmt: skip


@pytest.fixture
def nights(tmp_path: Path) -> Path:
    """Three nights: the second breaks A (its wheel 40 MB larger, then 2 MB more), which stays red; B runs 2.5
    times as slow on the second night; C failed on the first and is green since."""
    root = tmp_path / "history"
    write_night(root, "2026-11-26", "2026-11-26T01:17:03+00:00",
                [(A, Outcome()), (B, Outcome()), (C, Outcome(failed="smoke-wheel"))])
    write_night(root, "2026-11-27", "2026-11-27T01:17:05+00:00",
                [(A, Outcome(failed="smoke-wheel", wheel_mb=240)), (B, Outcome(slower=2.5)), (C, Outcome())])
    write_night(root, "2026-11-28", "2026-11-28T01:17:02+00:00",
                [(A, Outcome(failed="smoke-wheel", wheel_mb=242)), (B, Outcome()), (C, Outcome())])  # fmt: skip
    return root


def test_a_cell_broken_on_the_second_night_is_red_since_that_night(nights: Path) -> None:
    read = history.read(nights)
    assert [n.name for n in read.nights] == ["2026-11-26", "2026-11-27", "2026-11-28"]
    assert read.cell_ids == tuple(sorted((A.cell_id, B.cell_id, C.cell_id)))
    assert read.statuses(A.cell_id) == ["passed", "failed", "failed"]
    since = read.red_since(A.cell_id)
    assert since is not None and since.name == "2026-11-27" and read.red_nights(A.cell_id) == 2
    assert read.still_red() == [A.cell_id] and read.broke_tonight() == []
    assert read.red_since(C.cell_id) is None  # red on the first night only: green now
    assert read.tonight.cell(A.cell_id).why.startswith("smoke-wheel: wheel: import failed in a fresh venv with")
    a_tonight, a_first = read.tonight.cell(A.cell_id), read.nights[0].cell(A.cell_id)
    assert (a_first.sizes["wheel"], a_tonight.sizes["wheel"]) == (200_000_000, 242_000_000)
    assert read.nights[1].cell(B.cell_id).seconds["total"] == 2.5 * read.nights[0].cell(B.cell_id).seconds["total"]
    assert "publish" not in a_tonight.seconds  # not run after the failure: no time charted


def test_a_night_that_did_not_build_a_cell_neither_ends_nor_starts_its_red_streak(tmp_path: Path) -> None:
    root = tmp_path / "history"
    write_night(root, "n1", "", [(A, Outcome(failed="smoke-wheel")), (B, Outcome())])
    write_night(root, "n2", "", [(B, Outcome(failed="smoke-wheel"))])
    write_night(root, "n3", "", [(A, Outcome(failed="smoke-wheel")), (B, Outcome(failed="smoke-wheel"))])
    read = history.read(root)
    assert read.statuses(A.cell_id) == ["failed", history.NOT_BUILT, "failed"]
    since = read.red_since(A.cell_id)
    assert since is not None and since.name == "n1" and read.red_nights(A.cell_id) == 2
    b_since = read.red_since(B.cell_id)
    assert b_since is not None and b_since.name == "n2"
    write_night(root, "n4", "", [(B, Outcome())])  # tonight A is not built: still red, since n1; B green again
    read = history.read(root)
    assert read.statuses(A.cell_id)[-1] == history.NOT_BUILT and read.still_red() == [A.cell_id]
    assert read.red_since(B.cell_id) is None


def test_a_night_whose_report_is_unreadable_is_said_and_the_rest_is_drawn(nights: Path, tmp_path: Path) -> None:
    (nights / "2026-11-27" / "report.json").write_text('{"cells": [', encoding="utf-8")
    (nights / "2026-11-27b").mkdir()  # a night's folder without its report
    read = history.read(nights)
    unread = {n.name: n.problem for n in read.nights if n.problem}
    assert unread["2026-11-27"].startswith("not JSON (") and unread["2026-11-27b"] == "no report.json"
    assert read.statuses(A.cell_id) == ["passed", history.UNREAD, history.UNREAD, "failed"]
    since = read.red_since(A.cell_id)
    assert since is not None and since.name == "2026-11-28" and read.broke_tonight() == [A.cell_id]
    result = pipeline("history", str(nights), "-o", "page.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warned = " ".join(result.stderr.split())
    assert f"warning: {nights / '2026-11-27' / 'report.json'}: not JSON (" in warned
    assert "the page shows the night 2026-11-27 as unreadable" in warned and "Traceback" not in warned
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "<h2>Nights whose report could not be read</h2>" in html and "<th>2026-11-27 (unreadable)</th>" in html
    assert "<h2>Broke tonight</h2>" in html
    wheel = html[html.index(f'aria-label="{A.cell_id}: wheel"'):]
    wheel = wheel[: wheel.index("</svg>")]
    assert wheel.count("<circle") == 2 and "<polyline" not in wheel  # two unread nights between: a gap, no line


def test_the_command_says_what_broke_on_a_stdout_that_is_not_utf8(nights: Path, tmp_path: Path) -> None:
    for encoding in ("cp1252", "ascii"):
        result = pipeline("history", str(nights), "-o", "out/page.html", cwd=tmp_path, encoding=encoding)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == (
            f"wrote out/page.html: 3 nights (2026-11-26 to 2026-11-28), 3 cells; broke tonight: none; "
            f"still red: {A.cell_id}"
        )
    html = (tmp_path / "out" / "page.html").read_text(encoding="utf-8")
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    assert "<script" not in html


def test_the_trends_show_tonights_sizes_and_times_and_their_change(nights: Path, tmp_path: Path) -> None:
    assert pipeline("history", str(nights), "-o", "page.html", cwd=tmp_path).returncode == 0
    html = (tmp_path / "page.html").read_text(encoding="utf-8")
    a_section = html[html.index(f'<section class="trend" id="trend-{A.cell_id}">'):]
    a_section = a_section[: a_section.index("</section>")]
    assert f"<h3>{A.cell_id} (red since 2026-11-27)</h3>" in a_section
    assert "<tr><th>wheel</th>" in a_section and "<td>242.0 MB</td><td>+2.0 MB (+0.8%)</td>" in a_section
    b_section = html[html.index(f'id="trend-{B.cell_id}"'):]
    b_section = b_section[: b_section.index("</section>")]
    assert '<td>2m32s</td><td class="shrank">x0.40</td>' in b_section  # the night before took 2.5 times as long
    assert "<td>200.0 MB</td><td>same</td>" in b_section
    assert b_section.count("<svg") == 3 + 8  # wheel, conda, time; each stage's time


def test_the_page_of_three_nights_in_a_headless_browser(nights: Path, tmp_path: Path) -> None:
    result = pipeline("history", str(nights), "-o", "history.html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = tmp_path / "history.html"
    dom = shown(page, SCREENSHOT, tmp_path, "1400,1300")
    grid = dom[dom.index('<table class="grid">'):]
    grid = grid[: grid.index("</table>")]
    rows = {re.search(r'href="#trend-([^"]+)"', row).group(1): row  # type: ignore[union-attr]
            for row in grid.split("<tr>")[2:]}  # fmt: skip
    assert set(rows) == {A.cell_id, B.cell_id, C.cell_id}
    boxes = re.findall(r'<td class="([^"]+)"', rows[A.cell_id])
    assert boxes == ["passed", "failed first-red", "failed", "failed"]  # three nights, then "red since"
    assert "2026-11-27 (2 nights)" in rows[A.cell_id] and "✗ first red" in rows[A.cell_id]
    assert re.findall(r'<td class="([^"]+)"', rows[C.cell_id]) == ["failed", "passed", "passed", "notbuilt"]
    assert dom.count('<svg class="spark"') == 3 * (3 + 8)
    # a dot per cell, chart and night; publish did not run on A's two red nights nor on C's one
    assert dom.count("<circle") == 3 * 3 * 3 + (3 * 8 * 3 - 3)


def test_the_nightlys_own_night_report_is_read_back(nights: Path, tmp_path: Path) -> None:
    """``ci_summary.py --history``: tonight's report, the build jobs' reports with the GPU runner's smoke results in
    place and a cell whose build job wrote no report (which the history counts as failed), added to the history;
    the oldest nights past ``--keep`` gone."""
    artifacts = tmp_path / "artifacts"
    write_night(artifacts, f"report-{A.cell_id}", "2026-11-29T01:17:00+00:00", [(A, Outcome())])
    write_night(artifacts, f"smoke-{A.cell_id}", "2026-11-29T04:00:00+00:00", [(A, Outcome(failed="smoke-wheel"))])
    cells = {"include": [{"cell": c} for c in (A.cell_id, B.cell_id)]}
    summary = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_summary.py"), str(artifacts), "--cells",
                              json.dumps(cells), "--history", str(nights), "--night", "2026-11-29", "--keep", "3"],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert summary.returncode == 0, summary.stderr
    assert sorted(p.name for p in nights.iterdir()) == ["2026-11-27", "2026-11-28", "2026-11-29"]  # 3 kept
    read = history.read(nights)
    tonight = read.tonight
    assert tonight.name == "2026-11-29" and tonight.started == "2026-11-29T01:17:00+00:00"
    assert tonight.cell(A.cell_id).status == "failed" and tonight.cell(A.cell_id).why.startswith("smoke-wheel: ")
    assert (tonight.cell(B.cell_id).status, tonight.cell(B.cell_id).why) == ("failed", history.NO_REPORT)
    assert tonight.cell(C.cell_id).status == history.NOT_BUILT
    assert read.broke_tonight() == [B.cell_id]  # A has been red since 2026-11-27


def test_a_report_of_an_older_torchbuild_without_start_times_is_read(tmp_path: Path) -> None:
    """Reports written before the stages' starts were recorded: their stages' times are charted, their cell's time
    from start to end is not known (a gap, not the sum of stages that overlapped), and their page has no timeline."""
    root = tmp_path / "history"
    path = write_night(root, "2026-11-01", "2026-11-01T01:17:00+00:00", [(A, Outcome())])
    old = json.loads(path.read_text(encoding="utf-8"))
    for cell in old["cells"]:
        del cell["started"], cell["seconds"]
        for stage in cell["stages"]:
            del stage["start"]
    path.write_text(json.dumps(old), encoding="utf-8")
    write_night(root, "2026-11-02", "2026-11-02T01:17:00+00:00", [(A, Outcome())])
    read = history.read(root)
    first, second = (night.cell(A.cell_id) for night in read.nights)
    assert first.status == "passed" and first.seconds["repair"] == 40.0 and "total" not in first.seconds
    assert second.seconds["total"] == 152.0 and read.nights[0].started == ""
    page = report_html.page(old)
    assert "no timeline: this report has no start times of its stages" in page and "<svg" not in page
