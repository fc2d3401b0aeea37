"""The reports a run leaves in build/, as a user reads them: two runs of two cells in one build/ both in
report.json, report.md, junit.xml and report.html (each cell's own report in build/<cell-id>/); every artifact row
the file it names (the published one as the channel has it); JUnit counts that are those of its test cases; each
check's time; the results and install lines on stdout, the progress on stderr; ``publish build/`` publishing, and
naming, every cell. The stages before publish are stand-ins handing over real files (a wheel, a conda package made
by py-rattler-build); publish is the real stage into a real local channel."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.chromium import browse, console_errors, shown
from tests.integration.support_conda import assemble_small
from torchbuild.config.options import RunOptions
from torchbuild.plan import Plan
from torchbuild.results import Artifact, Check, StageResult, sha256_of
from torchbuild.run import runner
from torchbuild.stages.smoke.env import parse_results
from torchbuild.wheel.repair_report import RepairReport, Vendored

ROOT = Path(__file__).resolve().parents[2]
VENDORED = "torch.libs/libgomp-a34b3233.so.1"


def stages_of(plan: Plan, root: Path) -> dict[str, runner.StageFunction]:
    """Every stage but publish as a stand-in: the source wheel and the repaired one share a file name, not bytes."""
    cell = root / plan.work_dir
    source = Artifact.of(make_wheel(cell / "source", plan.root.wheel, {"torch/__init__.py": b"# as upstream\n"}))
    repaired = Artifact.of(make_wheel(cell / "repair", plan.root.wheel, {"torch/__init__.py": b"# repaired\n"}))
    vendored = Vendored(path=VENDORED, sha256="0" * 64, size=1, version=None, provider="system", origin="/usr/lib")
    wheel = plan.root.wheel
    RepairReport(wheel=wheel, platform=plan.platform, vendored=(vendored,)).write(cell / "repair" / "repair.json")
    report = Artifact.of(cell / "repair" / "repair.json")
    tag = plan.python.replace(".", "")
    conda = Artifact.of(assemble_small(cell / "conda", {"lib/t.txt": plan.python.encode()}, name="pytorch",
                                       version="2.13.0", build=f"py{tag}_cpu_0", depends=()))  # fmt: skip
    (cell / "logs").mkdir(parents=True, exist_ok=True)
    (cell / "logs" / "smoke-wheel.log").write_text("a log <with> markup & more\n", encoding="utf-8")
    smoke = (Check("wheel: import", "passed", "torch 2.13.0", duration=1.25),
             Check("wheel: cuda matmul", "skipped", "skipped (no GPU)", duration=0.01))  # fmt: skip
    verify = (Check("conda: <script>alert(1)</script>", "skipped", "a check's text from a tool", code="TB999"),)

    def hand(result: StageResult) -> runner.StageFunction:
        return lambda _ctx: result

    return {
        "source": hand(StageResult(outputs={"source_wheel": source})),
        "build": hand(StageResult(status="skipped", outputs={"built_wheel": source}, message="prebuilt wheel")),
        "repair": hand(StageResult(outputs={"repaired_wheel": repaired, "repair_report": report})),
        "conda": hand(StageResult(outputs={"conda_package": conda})),
        "verify": hand(StageResult(checks=verify)),
        "smoke-wheel": hand(StageResult(checks=smoke, message="1/2 checks passed")),
        "smoke-conda": hand(StageResult()),
    }


@dataclass(frozen=True)
class Runs:
    root: Path
    plans: tuple[Plan, Plan]
    stdout: tuple[str, str]
    stderr: tuple[str, str]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Two runs in one workspace: the cell for Python 3.11, then the one for 3.12."""
    root = tmp_path_factory.mktemp("workspace")
    plans = (torch_plan(python="3.11"), torch_plan(python="3.12"))
    stdout, stderr = [], []
    for plan in plans:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = runner.run([plan], root=root, options=RunOptions(), stages=stages_of(plan, root))
        assert code == 0, err.getvalue()
        stdout.append(out.getvalue())
        stderr.append(err.getvalue())
    return Runs(root, plans, (stdout[0], stdout[1]), (stderr[0], stderr[1]))


def test_two_runs_of_two_cells_in_one_build_are_both_in_every_report(runs: Runs) -> None:
    build = runs.root / "build"
    ids = [p.cell_id for p in runs.plans]
    assert [c["cell_id"] for c in json.loads((build / "report.json").read_text())["cells"]] == ids
    markdown = (build / "report.md").read_text()
    assert all(f"| `{p.cell_id}` | {p.version} |" in markdown for p in runs.plans)
    junit = ET.parse(build / "junit.xml").getroot()
    assert [s.get("name") for s in junit.iter("testsuite")] == ids
    html = (build / "report.html").read_text()
    assert all(f'<a href="#{cell_id}">{cell_id}</a>' in html for cell_id in ids)
    for cell_id in ids:  # each cell's own report, beside its state
        (own,) = json.loads((build / cell_id / "report.json").read_text())["cells"]
        assert own["cell_id"] == cell_id
        assert (build / cell_id / "report.html").is_file() and (build / cell_id / "junit.xml").is_file()


def test_every_artifact_row_is_its_own_file_and_the_published_one_as_the_channel_has_it(runs: Runs) -> None:
    plan = runs.plans[0]
    wheel = plan.root.wheel
    in_channel = runs.root / "channel" / "whl" / "simple" / "torch" / wheel
    source = runs.root / plan.work_dir / "source" / wheel
    assert sha256_of(in_channel) != sha256_of(source)  # the repaired wheel, not its input
    markdown = (runs.root / "build" / "report.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith(f"| `{plan.cell_id}` |") and wheel in line]
    assert f"| published_wheel | `{wheel}` | " in markdown
    assert any(sha256_of(in_channel) in row and "published_wheel" in row for row in rows), rows
    assert any(sha256_of(source) in row and "source_wheel" in row for row in rows), rows
    conda = next((runs.root / "channel" / "linux-64").glob("pytorch-*py311*.conda"))
    assert any(sha256_of(conda) in line and "published_conda" in line for line in markdown.splitlines())
    html = (runs.root / "build" / "report.html").read_text()
    assert sha256_of(in_channel) in html and sha256_of(conda) in html


def test_junit_counts_are_those_of_its_test_cases(runs: Runs) -> None:
    suites = ET.parse(runs.root / "build" / "junit.xml").getroot()
    for element in [suites, *suites.iter("testsuite")]:
        cases = list(element.iter("testcase"))
        assert element.get("tests") == str(len(cases))
        assert element.get("skipped") == str(sum(c.find("skipped") is not None for c in cases))
        assert element.get("failures") == str(sum(c.find("failure") is not None for c in cases))
    first = next(suites.iter("testsuite"))
    # 8 stages and 3 checks; skipped: the build stage (prebuilt wheel) and two checks
    assert (first.get("tests"), first.get("skipped")) == ("11", "3")
    timed = next(c for c in first.iter("testcase") if c.get("name") == "wheel: import")
    assert timed.get("time") == "1.250"


def test_report_json_has_each_checks_duration(runs: Runs) -> None:
    (cell, _) = json.loads((runs.root / "build" / "report.json").read_text())["cells"]
    checks = {c["name"]: c for s in cell["stages"] for c in s["checks"]}
    assert checks["wheel: import"]["duration"] == 1.25
    assert checks["conda: <script>alert(1)</script>"]["duration"] is None  # not timed on its own


def test_smoke_results_carry_each_checks_seconds() -> None:
    line = json.dumps({"check": "import", "status": "passed", "message": "torch 2.13.0", "seconds": "2.500"})
    (imported, *others) = parse_results("wheel", line, "torch.whl")
    assert (imported.name, imported.status, imported.duration) == ("wheel: import", "passed", 2.5)
    assert all(c.duration is None and c.status == "unverified" for c in others)  # not run: no time either


def test_results_and_install_lines_go_to_stdout_progress_to_stderr(runs: Runs) -> None:
    url = (runs.root / "channel").as_uri()
    out = runs.stdout[1]
    assert out.rstrip().endswith(f"pip install --index-url {url}/whl/simple torch==2.13.0+cpu")
    assert f"  conda install -c {url} pytorch\n" in out
    assert "report of every cell in" in out and "report.html" in out
    assert "▶ source" in runs.stderr[1] and "▶ source" not in out


def test_the_page_escapes_what_tools_and_wheels_say_and_links_the_logs(runs: Runs) -> None:
    html = (runs.root / "build" / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    cell_id = runs.plans[0].cell_id
    assert f'<a href="{cell_id}/logs/smoke-wheel.log">' in html
    assert (runs.root / "build" / cell_id / "logs" / "smoke-wheel.log").is_file()
    assert VENDORED in html and "http" not in html.replace(html[html.index("<body>"):], "")  # nothing fetched


def test_publish_build_publishes_and_names_every_cell(runs: Runs, tmp_path: Path) -> None:
    channel = tmp_path / "elsewhere"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "publish", "build", "--channel", str(channel)],
        cwd=runs.root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for plan in runs.plans:
        assert f"cell {plan.cell_id}: " in proc.stdout
        assert (channel / "whl" / "simple" / "torch" / plan.root.wheel).is_file()
    assert f"pip install --index-url {channel.as_uri()}/whl/simple torch" in proc.stdout


SCREENSHOT = ROOT / "build" / "test-output" / "report.png"  # build/ is ignored by git
def test_the_page_loads_in_a_headless_browser_with_both_cells_in_its_grid(runs: Runs, tmp_path: Path) -> None:
    page = runs.root / "build" / "report.html"
    dom = shown(page, SCREENSHOT, tmp_path, "1400,1000")
    grid = dom[dom.index('<table class="grid">'):]
    grid = grid[: grid.index("</table>")]
    assert all(f'<a href="#{plan.cell_id}">{plan.cell_id}</a>' in grid for plan in runs.plans)
    assert grid.count('class="passed"') == 2 * 7 and grid.count('class="skipped"') == 2  # 8 stages; build skipped
    # the console check sees a script's error where there is one
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><html><body><script>throw new Error('broken page')</script></body></html>")
    said = browse(broken, tmp_path / "profile-broken", "--enable-logging=stderr", "--v=0", "--dump-dom").stderr
    assert any("broken page" in line for line in console_errors(said)), said[-2000:]
