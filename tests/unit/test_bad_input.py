"""Bad input, tried as a new user would, one table per command: each case runs ``python pipeline.py ...`` in an
empty working directory and must end with the exit code given (2: usage, 1: a failed stage), a message that names
the valid choices or the fix, no traceback, and every file below the working directory (the channel and the
artifacts included) byte for byte and mode for mode as it was; a failed stage (exit 1) adds its report below build/
and nothing else."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.builders import make_wheel
from tests.conftest import ROOT
from tests.integration.support_conda import assemble_small, repack
from torchbuild.commands import cli
from torchbuild.commands import publish as publish_cmd

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CONDA = "pytorch-2.13.0-py3.11_cpu_0.conda"
CELL = "linux-64-cpu-py3.11"
LINUX_CPU = ("--platform", "linux-64", "--cuda", "cpu", "--py", "3.11")
CHANNELS = "Valid channels: a local directory, s3://bucket/prefix, anaconda://owner or anaconda://owner/label."
DUPLICATE = "cuda: [cpu]\npython: ['3.11']\ncuda: ['12.6']\n"
EMPTY = "platforms: [linux-64]\ncuda: [cpu]\npython: ['3.11']\nexclude: [{cuda: cpu}]\n"
EMPTY_VALUE = "is empty: give a value (an unset variable gives an empty one)"
DEEP_JSON = '{"a":' * 5000 + "1" + "}" * 5000  # past Python's recursion limit
DEEP_YAML = "cuda: " + "[" * 5000 + "]" * 5000 + "\n"
NO_CELLS = "has no cells: its exclude rules remove every platform x cuda x python combination"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]  # '{name}' is an artifact's path (see ``artifacts``), '{channel}' the channel's
    message: str  # in stderr, whitespace folded (the console may wrap); '{name}' as in args
    code: int  # 2: usage; 1: a failed stage
    files: Mapping[str, str]  # text files written below the working directory first
    put: Mapping[str, str]  # artifacts copied there first: working-directory path -> artifact name
    env: Mapping[str, str]  # environment variables for the command; '{cwd}' is the working directory, as in args


def case(*args: str, message: str, code: int = 2, files: Mapping[str, str] | None = None,
         put: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None, id: str) -> object:  # fmt: skip
    return pytest.param(Case(args, message, code, files or {}, put or {}, env or {}), id=id)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small real wheels and conda packages, made by the project's test builders, some then broken; and a channel
    the project's own publish wrote."""
    root = tmp_path_factory.mktemp("artifacts")
    made = {
        "wheel": make_wheel(root / "good", WHEEL),
        "evil_wheel": make_wheel(root / "evil", WHEEL, extra_members={"../../evil.txt": b"x\n"}),
        "record_wheel": make_wheel(root / "record", WHEEL, record_overrides={"torch/__init__.py": "sha256=AAAA,3"}),
        "tags_wheel": make_wheel(root / "tags", WHEEL, tags=["cp311-cp311-win_amd64"]),
        "two_dist_info": make_wheel(root / "dist", WHEEL, extra_members={"other-1.0.dist-info/METADATA": b"x"}),
        "deep_sbom_wheel": make_wheel(root / "deep-sbom", WHEEL, extra_members={
            "torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json": DEEP_JSON.encode()}),
        "conda": assemble_small(root / "conda", {"lib/a.txt": b"a\n"}, name="pytorch", version="2.13.0",
                                build="py3.11_cpu_0"),
        "other_conda": assemble_small(root / "other", {"lib/a.txt": b"b\n"}, name="pytorch", version="2.13.0",
                                      build="py3.11_cpu_0"),
        "bz2": assemble_small(root / "bz2", {"lib/a.txt": b"a\n"}, name="pytorch", version="2.13.0",
                              build="py3.11_cpu_0", tar_bz2=True),
    }  # fmt: skip
    (root / "text").mkdir()
    made["text_wheel"] = root / "text" / WHEEL
    made["text_wheel"].write_text("not a wheel\n")
    for name, source in (("truncated_conda", made["conda"]), ("truncated_bz2", made["bz2"])):
        (root / name).mkdir()
        made[name] = root / name / source.name
        made[name].write_bytes(source.read_bytes()[:300])
    (root / "tampered").mkdir()
    made["tampered_conda"] = repack(made["conda"], root / "tampered" / CONDA, {"lib/a.txt": b"changed\n"})
    (root / "renamed").mkdir()
    made["renamed_conda"] = repack(made["conda"], root / "renamed" / "pytorch-2.13.0-py3.11_cpu_1.conda", {})
    (root / "zip").mkdir()
    made["zip"] = root / "zip" / "torch.zip"
    made["zip"].write_bytes(made["wheel"].read_bytes())
    made["channel"] = root / "channel"
    assert publish_cmd.publish([made["wheel"], made["conda"]], str(made["channel"]), root) == 0
    return made


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every file and directory below ``root``: mode and bytes."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mode, p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def fill(text: str, paths: Mapping[str, str]) -> str:
    for name, path in paths.items():
        text = text.replace("{" + name + "}", path)
    return text


def run_case(c: Case, artifacts: Mapping[str, Path], cwd: Path) -> None:
    shutil.copytree(artifacts["channel"], cwd / "channel")
    for relative, text in c.files.items():
        (cwd / relative).parent.mkdir(parents=True, exist_ok=True)
        if text == "FIFO":
            os.mkfifo(cwd / relative)
        else:
            (cwd / relative).write_text(text)
    for relative, name in c.put.items():
        shutil.copy(artifacts[name], cwd / relative)
    paths = {**{k: str(v) for k, v in artifacts.items()}, "channel": str(cwd / "channel"), "cwd": str(cwd)}
    args = [fill(a, paths) for a in c.args]
    before = snapshot(cwd)
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *args],
        cwd=cwd, capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT),
             **{k: fill(v, paths) for k, v in c.env.items()}},
    )  # fmt: skip
    shown = result.stdout + result.stderr
    assert result.returncode == c.code, shown
    assert fill(c.message, paths) in " ".join(result.stderr.split()), shown
    assert "Traceback" not in shown and "panicked" not in shown, shown
    after = {path: v for path, v in snapshot(cwd).items() if c.code == 2 or not path.startswith("build")}
    assert after == before  # nothing written, nothing changed: the channel neither


@pytest.mark.parametrize(
    "c",
    [
        case("--only", CELL, "--cuda", "12.4",
             message=f"--only {CELL} names one cell of the matrix, with its platform, CUDA, Python and torch; --cuda "
                     "would be ignored. Give --only alone, or --cuda without --only.", id="only-and-cuda"),
        case(*LINUX_CPU, "--format", "tar.bz2", "--compression-level", "22",
             message="--compression-level 22 does not fit --format tar.bz2. Valid levels: 1 to 22 with --format conda "
                     "(zstd); 1 to 9 with --format tar.bz2 (bzip2).", id="bzip2-level-22"),
        case(*LINUX_CPU, "--compression-level", "0", message="--compression-level 0 does not fit --format conda. "
             "Valid levels: 1 to 22", id="level-0"),
        case(*LINUX_CPU, "--compression-threads", "0", message="--compression-threads 0: give 1 or more.",
             id="threads-0"),
        case(*LINUX_CPU, "--git-url", "https://example.org/pytorch.git",
             message="--git-url https://example.org/pytorch.git names the repository --git-ref is cloned from, and no "
                     "--git-ref is given: add --git-ref", id="git-url-without-git-ref"),
        case(*LINUX_CPU, "--wheel", "missing.whl",
             message="--wheel missing.whl: no such file; give the path of a torch .whl file.", id="wheel-missing"),
        case(*LINUX_CPU, env={"TMPDIR": "{cwd}/no-such-folder"}, message="TMPDIR={cwd}/no-such-folder is a folder "
             "that does not exist: temporary files go there. Give an existing folder you can write to, or unset "
             "TMPDIR.", id="tmpdir-missing"),
        case(*LINUX_CPU, env={"TMPDIR": "{cwd}/a-file"}, files={"a-file": "x\n"}, message="TMPDIR={cwd}/a-file is "
             "a file, not a folder", id="tmpdir-is-a-file"),
        case(*LINUX_CPU, env={"GITHUB_STEP_SUMMARY": "{cwd}/pipe"}, files={"pipe": "FIFO"},
             message="GITHUB_STEP_SUMMARY={cwd}/pipe is a named pipe (appending to it would wait for a reader): it "
                     "names the file the report is appended to.", id="step-summary-is-a-fifo"),
        case(*LINUX_CPU, "--wheel", "", message=f"argument --wheel: {EMPTY_VALUE}", id="wheel-empty"),
        case("--only=", message=f"argument --only: {EMPTY_VALUE}", id="only-empty"),
        case(*LINUX_CPU, "--wheel", ".", message="--wheel .: is a directory; give the path of a torch .whl file.",
             id="wheel-is-a-directory"),
        case(*LINUX_CPU, "--wheel", "{wheel}", "--git-ref", "v2.5.1",
             message="--wheel and --git-ref both name the source: give one of --wheel, --source-dir or --git-ref.",
             id="two-sources"),
        case(*LINUX_CPU, "--repodata", "no/such/dir", message="--repodata no/such/dir: no such directory; give a "
             "directory with <channel>/<subdir>/repodata.json", id="repodata-missing"),
        case(*LINUX_CPU, "--channel", "", message=f"--channel: The channel name is empty. {CHANNELS}",
             id="channel-empty"),
        case(*LINUX_CPU, "--channel", "ftp://host/channel",
             message=f"--channel: Unknown channel scheme 'ftp://' in 'ftp://host/channel'. {CHANNELS}",
             id="channel-ftp"),
        case(*LINUX_CPU, "--channel", "s3:/bucket/prefix",
             message="--channel: The channel 's3:/bucket/prefix' looks like a URL with a missing '//'.",
             id="channel-missing-slash"),
        case(*LINUX_CPU, "--channel", "a-file", files={"a-file": "x\n"},
             message="a-file is not a directory: give a directory (it is made if missing).", id="channel-is-a-file"),
        case(*LINUX_CPU, "--format", "zip", message="argument --format: invalid choice: 'zip' (choose from 'conda', "
             "'tar.bz2')", id="format-unknown"),
        case(*LINUX_CPU, "--msvc", "14.29", message="--msvc 14.29 pins the MSVC toolset of win-64 cells, and no "
             "selected cell is win-64 (linux-64): add --platform win-64, or leave --msvc out.", id="msvc-on-linux"),
        case(*LINUX_CPU, "--torch", "2.13.0", "--wheel", "{text_wheel}", "--cache-dir", "build/cache", code=1,
             message="source: {text_wheel} is not a wheel (not a zip archive / truncated)", id="wheel-not-a-zip"),
        case(*LINUX_CPU, "--torch", "2.13.0", "--wheel", "{evil_wheel}", "--cache-dir", "build/cache", code=1,
             message="has members that escape the install root: '../../evil.txt' ('..' component)",
             id="wheel-member-escapes"),
        case(*LINUX_CPU, "--packages", "torch,torchvision",
             message="torchvision cannot ship with torch 2.13.0+cpu (linux-64, Python 3.11): PyPI's linux-64 wheel of "
                     "torchvision 0.28.0 is a CUDA 13.0 build (+cu130) linking libc10_cuda.so, libcudart.so.13, "
                     "libtorch_cuda.so, which this cell's CPU torch does not have (it fails at import)",
             id="companion-needs-cuda-torch"),
        # A win-64 cell that compiles a companion, on this Linux host: refused before anything runs, as doctor says.
        case("--platform", "win-64", "--cuda", "cpu", "--py", "3.11", "--companion-source", "torchvision=vision",
             files={"vision/version.txt": "0.28.0a0\n"},
             message="win-64-cpu-py3.11 compiles torchvision from a checkout, and this host cannot compile it; "
                     "missing: - a win-64 host: this host is linux-64; win-64 cells compile on win-64",
             id="companion-compile-without-msvc"),
        case(*LINUX_CPU, "--companion-ref", "torchvision", message="--companion-ref torchvision: give NAME=REF",
             id="companion-ref-without-ref"),
        case(*LINUX_CPU, "--torch", "2.13.0", "--packages", "torch,torchvision==0.27.0",
             message="torchvision 0.27.0 requires torch==2.12.0 (its wheels' Requires-Dist); this cell's torch is "
                     "2.13.0+cpu", id="companion-pin-mismatch"),
        case(*LINUX_CPU, "--packages", "torch,torchvison",
             message="--packages torch,torchvison: 'torchvison' is not a package a cell ships. Did you mean "
                     "'torchvision'? Give torch, torchvision or torchaudio", id="packages-unknown"),
        case("--matrix", "m.yaml", *LINUX_CPU, files={"m.yaml": "channel: ftp://x\n"},
             message=f"m.yaml:1: channel: Unknown channel scheme 'ftp://' in 'ftp://x'. {CHANNELS}",
             id="matrix-channel-ftp"),
    ],
)  # fmt: skip
def test_run(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("plan", "--json", "--only", CELL, "--py", "3.12", message="--py would be ignored. Give --only alone",
             id="only-and-py"),
        case("plan", "--only", CELL, "--platform", "win-64", "--torch", "2.5.1",
             message="--platform or --torch would be ignored. Give --only alone, or --platform or --torch without "
                     "--only.", id="only-platform-and-torch"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": DUPLICATE},
             message="m.yaml:3: 'cuda' is given twice, on line 1 and on line 3; keep one", id="duplicate-key"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "build:\n  max_jobs: 2\nbuild:\n  generator: ninja\n"},
             message="m.yaml:3: 'build' is given twice, on line 1 and on line 3", id="duplicate-build"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "platforms: linux-64\n"},
             message="m.yaml:1: 'platforms' must be a list, e.g. platforms: [linux-64].", id="platforms-scalar"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "build: 3\n"},
             message="m.yaml:1: 'build' must be a mapping of key: value, e.g. build: {max_jobs: auto, "
                     "timeout_hours: 6}.", id="build-scalar"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "cuda: [[12.4]]\n"},
             message="m.yaml:1: each 'cuda' entry must be a single value, not a list, e.g. cuda: [cpu, \"12.6\"].",
             id="cuda-nested-list"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "channel: anaconda://a/b/c\n"},
             message="m.yaml:1: channel: 'anaconda://a/b/c' is not an anaconda.org channel: use anaconda://owner or "
                     "anaconda://owner/label", id="channel-anaconda-too-deep"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": EMPTY}, message=f"m.yaml {NO_CELLS}",
             id="every-cell-excluded"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "cuda: [cpu]\npackages: [torchvision]\n"},
             message="m.yaml:2: packages: packages must include torch: every cell ships torch", id="packages-no-torch"),
        case("plan", "--only", "", message=f"argument --only: {EMPTY_VALUE}", id="only-empty"),
        case("plan", "--torch", "", *LINUX_CPU, message=f"argument --torch: {EMPTY_VALUE}", id="torch-empty"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "packages: ''\n"},
             message="m.yaml:1: 'packages' is empty; give a list, e.g. packages: [torch, torchvision, torchaudio].",
             id="packages-empty-string"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": DEEP_YAML},
             message="m.yaml:1: invalid YAML: nested deeper than 64 levels.", id="matrix-nested-too-deep"),
        case("plan", "--matrix", "m.yaml", files={"m.yaml": "test_command: pytest | tee log\n"},
             message="m.yaml:1: test_command 'pytest | tee log' uses '|', a shell feature: torchbuild runs each "
                     "'&&'-separated command without a shell", id="test-command-pipe"),
        case("plan", *LINUX_CPU, env={"SOURCE_DATE_EPOCH": "\uff11\uff17" + "\uff10" * 8},  # fullwidth 1700000000
             message="SOURCE_DATE_EPOCH='\uff11\uff17\uff10\uff10\uff10\uff10\uff10\uff10\uff10\uff10' is not a "
                     "number of seconds since 1970-01-01", id="source-date-epoch-fullwidth-digits"),
        case("plan", *LINUX_CPU, env={"SOURCE_DATE_EPOCH": "1_700_000_000"},
             message="SOURCE_DATE_EPOCH='1_700_000_000' is not a number of seconds",
             id="source-date-epoch-underscores"),
        case("plan", "--platform", "linux-32", "--cuda", "cpu", "--py", "3.11",
             message="PyTorch does not support 32-bit Linux: use --platform linux-64.", id="linux-32"),
    ],
)  # fmt: skip
def test_plan(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("matrix", "--github", "--estimate", message="--github and --estimate both choose what 'matrix' prints "
             "(the JSON for GitHub Actions, or the runner hours): give one of them.", id="github-and-estimate"),
        case("matrix", "--github", "--matrix", "m.yaml", files={"m.yaml": EMPTY}, message=f"m.yaml {NO_CELLS}",
             id="github-every-cell-excluded"),
        case("matrix", "--only", CELL, "--cuda", "cpu", message="--cuda would be ignored", id="only-and-cuda"),
        case("matrix", "--only", "linux-64-cpu-py3.99", message="No cell 'linux-64-cpu-py3.99' in",
             id="only-unknown-cell"),
        case("matrix", "--matrix", "m.yaml", files={"m.yaml": "channel: s3://\n"},
             message="m.yaml:1: channel: 's3://' is not an S3 channel: use s3://bucket/prefix", id="channel-s3-empty"),
        case("matrix", "--matrix", "m.yaml", files={"m.yaml": "torch: latest\ntorch: 2.5.1\n"},
             message="m.yaml:2: 'torch' is given twice, on line 1 and on line 2", id="duplicate-torch"),
    ],
)  # fmt: skip
def test_matrix(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("publish", "{text_wheel}", "--channel", "{channel}", message=f"{WHEEL} is not a wheel (not a zip "
             "archive / truncated): File is not a zip file",
             id="text-file-named-whl"),
        case("publish", "{evil_wheel}", "--channel", "{channel}", message="TB203: ../../evil.txt ('..' component)",
             id="member-escapes"),
        case("publish", "{record_wheel}", "--channel", "{channel}",
             message="TB201: torch/__init__.py: sha256 differs from RECORD", id="record-hash"),
        case("publish", "{tags_wheel}", "--channel", "{channel}", message="TB204: WHEEL's Tag lines "
             "(cp311-cp311-win_amd64) differ from the file name's", id="wheel-tags"),
        case("publish", "{two_dist_info}", "--channel", "{channel}", message="expected one .dist-info directory, "
             "found other-1.0.dist-info, torch-2.13.0+cpu.dist-info", id="two-dist-info"),
        case("publish", "{truncated_conda}", "--channel", "{channel}", message=f"{CONDA}: cannot be read",
             id="truncated-conda"),
        case("publish", "{tampered_conda}", "--channel", "{channel}",
             message="is not a valid conda package; nothing was published: C1146: lib/a.txt", id="payload-hash"),
        case("publish", "{renamed_conda}", "--channel", "{channel}",
             message="is not a valid conda package; nothing was published: C1111: index.json build 'py3.11_cpu_0' "
                     "but the file name says 'py3.11_cpu_1'",
             id="file-name-vs-index"),
        case("publish", "{wheel}", "{truncated_bz2}", "--channel", "{channel}",
             message="pytorch-2.13.0-py3.11_cpu_0.tar.bz2: cannot be read", id="good-then-bad"),
        case("publish", "{other_conda}", "--channel", "{channel}", message="refusing to overwrite a different file "
             "under an existing name (bump build_number in matrix.yaml to publish a new build, or pass --replace)",
             id="different-file-same-name"),
        case("publish", "{wheel}", "--channel", "{channel}", put={"channel/linux-64/broken-1.0-0.conda": "zip"},
             message="channel/linux-64/broken-1.0-0.conda: the .conda has no info-broken-1.0-0.tar.zst. The "
                     "channel's index was left as it was", id="channel-holds-a-broken-package"),
        case("publish", "{wheel}", "--channel", "", message=f"The channel name is empty. {CHANNELS}",
             id="channel-empty"),
        case("publish", "{wheel}", "--channel", "ftp://host/x", message=f"Unknown channel scheme 'ftp://' in "
             f"'ftp://host/x'. {CHANNELS}", id="channel-ftp"),
        case("publish", "{wheel}", "--channel", "a-file", files={"a-file": "x\n"},
             message="a-file is not a directory: give a directory (it is made if missing).", id="channel-is-a-file"),
        case("publish", "{zip}", "--channel", "{channel}",
             message="cannot publish this file; give .conda, .tar.bz2 or .whl files, or directories",
             id="unknown-suffix"),
        case("publish", "missing.whl", "--channel", "{channel}", message="missing.whl: no such file or directory",
             id="missing-file"),
        case("publish", "run", "--channel", "{channel}", files={"run/build/report.json": DEEP_JSON},
             message="run/build/report.json: not a torchbuild report (nested deeper than 64 levels)",
             id="report-nested-too-deep"),
        case("publish", "empty-dir", "--channel", "{channel}", files={"empty-dir/notes.txt": "x\n"},
             message="empty-dir: no report.json below it", id="directory-without-report"),
    ],
)  # fmt: skip
def test_publish(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("index", "--channel", "no/such/dir", message="no/such/dir does not exist: give the directory a publish "
             "wrote", id="channel-missing"),
        case("index", "--channel", "a-file", files={"a-file": "x\n"}, message="a-file is not a directory",
             id="channel-is-a-file"),
        case("index", "--channel", "{channel}", put={"channel/linux-64/broken-1.0-0.conda": "truncated_conda"},
             message="channel/linux-64/broken-1.0-0.conda: cannot be read: File is not a zip file. The channel's "
                     "index was left as it was: replace or remove that file", id="corrupt-conda"),
        case("index", "--channel", "{channel}", put={"channel/linux-64/broken-1.0-0.tar.bz2": "truncated_bz2"},
             message="channel/linux-64/broken-1.0-0.tar.bz2: cannot be read", id="corrupt-tar-bz2"),
        case("index", "--channel", "", message=f"The channel name is empty. {CHANNELS}", id="channel-empty"),
        case("index", "--channel", "anaconda://owner", message="anaconda://owner is an anaconda.org channel, which "
             "indexes what it receives", id="anaconda"),
        case("index", message="the following arguments are required: --channel", id="no-channel"),
    ],
)  # fmt: skip
def test_index(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("smoke", message="smoke takes one cell", id="no-cell"),
        case("smoke", "--only", CELL, "--py", "3.12", message="--py would be ignored", id="only-and-py"),
        case("smoke", "--only", CELL, message=f"build/{CELL}/state.json: no such file. Download the build job's "
             "artifact", id="no-build-dir"),
        case("smoke", "--only", CELL, files={f"build/{CELL}/state.json": "{"},
             message=f"build/{CELL}/state.json: unreadable state", id="state-not-json"),
        case("smoke", "--only", CELL, files={f"build/{CELL}/state.json": DEEP_JSON},
             message=f"build/{CELL}/state.json: unreadable state (NestedTooDeep: nested deeper than 64 levels)",
             id="state-nested-too-deep"),
    ],
)  # fmt: skip
def test_smoke(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("sbom", "{deep_sbom_wheel}", message=f"{WHEEL}: torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json is "
             "not JSON: nested deeper than 64 levels", id="sbom-nested-too-deep"),
    ],
)  # fmt: skip
def test_sbom(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


NIGHTS = "give a folder with a folder per night, each holding that night's report.json"


@pytest.mark.parametrize(
    "c",
    [
        case("history", "nights", message=f"nights does not exist: {NIGHTS}", id="missing"),
        case("history", "nights", files={"nights/notes.txt": ""}, message=f"nights has no nights: {NIGHTS}",
             id="no-nights"),
        case("history", "nights", files={"nights/2026-11-28/report.json": "{"},
             message="no night in nights has a readable report.json: nights/2026-11-28/report.json: not JSON "
             "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))", id="corrupt"),
        case("history", "nights", files={"nights/2026-11-28/report.json": DEEP_JSON},
             message="nights/2026-11-28/report.json: not JSON (nested deeper than 64 levels)", id="nested-too-deep"),
        case("history", "nights", files={"nights/2026-11-28/report.json": "[1, 2]"},
             message="nights/2026-11-28/report.json: not a torchbuild report (ValueError: expected an object whose "
             "'cells' is a list)", id="not-a-report"),
        case("history", "nights", files={"nights/2026-11-28/summary.json": "{}"},
             message="nights/2026-11-28/report.json: no report.json", id="night-without-report"),
        case("history", "nights", "-o", "out", files={"nights/n1/report.json": '{"cells": []}', "out/x": ""},
             message="-o out is a directory: give the path of the page to write", id="output-is-a-directory"),
    ],
)  # fmt: skip
def test_history(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.parametrize(
    "c",
    [
        case("doctor", "--only", CELL, "--torch", "2.5.1", message="--torch would be ignored", id="only-and-torch"),
        case("doctor", "--cuda", "9.3", "--py", "3.6", message="Unknown CUDA version '9.3'. Valid: cpu, 8.0",
             id="unknown-cuda"),
        case("doctor", "--platform", "win-64", "--cuda", "12.1", "--py", "3.11", "--msvc", "14.40",
             message="refuses MSVC 14.40", id="msvc-refused"),
        case("doctor", *LINUX_CPU, "--msvc", "14.29", message="pins the MSVC toolset of win-64 cells",
             id="msvc-on-linux"),
        case("doctor", "--matrix", "m.yaml", files={"m.yaml": DUPLICATE}, message="'cuda' is given twice",
             id="duplicate-key"),
    ],
)  # fmt: skip
def test_doctor(c: Case, artifacts: dict[str, Path], tmp_path: Path) -> None:
    run_case(c, artifacts, tmp_path)


@pytest.mark.skipif(sys.platform == "win32", reason="skipped: POSIX file modes")
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_channel_files_get_the_umask_mode(umask: int, mode: int, artifacts: dict[str, Path], tmp_path: Path) -> None:
    """Packages, pages, .sha256 files and repodata alike get the mode the umask gives, as any file a user writes."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), "publish", str(artifacts["wheel"]), str(artifacts["conda"]),
         "--channel", "channel"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120, umask=umask,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    files = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*") if p.is_file()}
    assert {Path(name).name for name in files} >= {CONDA, WHEEL, WHEEL + ".sha256", "index.html", "repodata.json"}
    assert files == dict.fromkeys(files, mode)


def test_a_cell_no_index_has_a_wheel_for_is_refused_naming_what_was_looked_for(tmp_path: Path) -> None:
    """`latest` with package indexes that offer no wheel for the cell (an empty local index, no pip config)."""
    (tmp_path / "index").mkdir()
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": (tmp_path / "index").as_uri(), "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}  # fmt: skip
    (tmp_path / "work").mkdir()
    before = snapshot(tmp_path / "work")
    result = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), *LINUX_CPU], cwd=tmp_path / "work",
                            capture_output=True, text=True, check=False, timeout=300, env=env)  # fmt: skip
    shown = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        f"{CELL}: the configured package indexes (pip config, PIP_INDEX_URL, PIP_FIND_LINKS, constraints) offer no "
        "prebuilt torch wheel +cpu for cp311-cp311-manylinux_2_28_x86_64 of any release that supports this cell"
    ) in shown, shown
    assert "give one with --wheel PATH, or compile with --source-dir/--git-ref" in shown
    assert "Traceback" not in result.stderr and snapshot(tmp_path / "work") == before


@pytest.mark.parametrize(("channel", "said"), [
    ("/".join(["a" * 200] * 21), "bytes long; with the files a channel holds below it, it would pass the 4,096 bytes a "
     "path may have. Give one of at most 3,840 bytes."),
    ("a" * 4300, "has a name of 4300 bytes; a file system takes at most 255 in one name. Give a shorter path."),
], ids=["path", "name"])  # fmt: skip
def test_a_channel_path_longer_than_a_file_system_takes_is_refused_in_one_line(
    channel: str, said: str, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    # Before: exit 1 with the OS's "File name too long" and the whole 4,300-character path.
    result = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "publish", str(artifacts["wheel"]),
                             "--channel", channel], cwd=tmp_path, capture_output=True, text=True, check=False,
                            timeout=120, env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: The channel path {'a' * 60}...{'a' * 12} ") and line.endswith(said), line
    assert len(line) < 400 and list(tmp_path.iterdir()) == []


def test_every_flag_that_takes_a_value_refuses_an_empty_one(capsys: pytest.CaptureFixture[str]) -> None:
    """An unset CI variable gives ``--only ''``: no flag may take it as "not given" (the whole matrix, the latest
    torch). Every option of every command that takes a free value is tried; the parse ends with exit 2."""
    parser = cli.build_parser()
    tried = []
    for command, sub in next(a for a in parser._actions if a.choices and "run" in a.choices).choices.items():
        for action in sub._actions:
            if action.nargs == 0 or action.choices or action.type is int or action.dest == "help":
                continue
            flag = action.option_strings[0] if action.option_strings else None
            if flag == "--channel":  # the channel's own check names the valid channels (cases above)
                continue
            args = [command, *([flag, ""] if flag else [""])]
            with pytest.raises(SystemExit) as stopped:
                cli.main(args)
            assert stopped.value.code == 2, args
            shown = " ".join(capsys.readouterr().err.split())
            named = "/".join(action.option_strings) or action.metavar
            assert f"argument {named}: {EMPTY_VALUE}" in shown, (args, shown)
            tried.append(args)
    assert len(tried) > 20  # every command's flags were looked at
