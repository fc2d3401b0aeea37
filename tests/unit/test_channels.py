"""The channel pieces without a server: URLs, PEP 503 pages, repodata records and merges, redaction, and how
``publish`` finds a CI job's artifacts below its report.json."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel, torch_plan
from tests.integration.support_conda import assemble_small
from torchbuild.channels import local, pep503
from torchbuild.channels import repodata as rd
from torchbuild.channels.backends import open_channel
from torchbuild.channels.local import LocalChannel
from torchbuild.channels.secrets import MASK, redact, register
from torchbuild.commands.publish import collect, locate
from torchbuild.conda import rattler_child
from torchbuild.config.channel_spec import Location, parse_s3
from torchbuild.errors import UserError
from torchbuild.results import Artifact
from torchbuild.run import report
from torchbuild.run.records import EXIT_UNVERIFIED, CellRun, StageRecord, reaches_channel

WHEEL = "torch-2.5.1+cpu-cp311-cp311-win_amd64.whl"


def test_s3_urls() -> None:
    assert parse_s3("s3://my-bucket/nightly/v1/") == Location("my-bucket", "nightly/v1")
    assert parse_s3("s3://my-bucket") == Location("my-bucket", "")
    assert Location("my-bucket", "nightly").key("linux-64", "repodata.json") == "nightly/linux-64/repodata.json"
    assert Location("my-bucket", "").key("whl", "simple") == "whl/simple"
    for bad in ("s3://", "s3://UPPER/x", "s3://a/x", "s3://under_score/x"):
        with pytest.raises(UserError, match="S3"):
            parse_s3(bad)


def test_unknown_scheme_names_the_valid_channels(tmp_path: Path) -> None:
    with pytest.raises(UserError) as error:
        open_channel("ftp://host/channel", tmp_path)
    assert "Unknown channel scheme 'ftp://'" in str(error.value)
    assert "s3://bucket/prefix" in str(error.value) and "anaconda://owner/label" in str(error.value)
    assert isinstance(open_channel("channel", tmp_path), LocalChannel)


def test_pep503_pages_quote_the_local_version_and_read_back() -> None:
    page = pep503.project_page("torch", {WHEEL: "a" * 64, "torch-2.5.1-cp311-cp311-win_amd64.whl": "b" * 64})
    assert 'href="torch-2.5.1%2Bcpu-cp311-cp311-win_amd64.whl#sha256=' + "a" * 64 + '"' in page
    assert f">{WHEEL}</a>" in page
    assert pep503.wheel_links(page) == {WHEEL: "a" * 64, "torch-2.5.1-cp311-cp311-win_amd64.whl": "b" * 64}
    assert pep503.project_links(pep503.root_page(["torch", "triton", "torch"])) == {"torch", "triton"}
    assert '<meta name="pypi:repository-version" content="1.0">' in page


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("packages")
    return [
        assemble_small(out, {"lib/a.txt": b"a"}, name="pytorch", version="2.5.1", build="py3.11_cpu_0"),
        assemble_small(
            out, {"lib/b.txt": b"b"}, name="pytorch", version="2.5.1", build="py3.12_cpu_0", tar_bz2=True,
            depends=("python >=3.12,<3.13.0a0",),
        ),
    ]  # fmt: skip


def test_records_match_what_rattler_index_writes(packages: list[Path], tmp_path: Path) -> None:
    channel = tmp_path / "channel"
    for package in packages:
        (channel / "linux-64").mkdir(parents=True, exist_ok=True)
        shutil.copy(package, channel / "linux-64" / package.name)
    (channel / "noarch").mkdir()
    rattler_child.call("index", directory=str(channel), write_zst=False)
    indexed = json.loads((channel / "linux-64" / "repodata.json").read_text())
    for package in packages:
        record = rd.record_of(package)
        theirs = indexed[rd.section(package.name)][package.name]
        assert record.subdir == "linux-64"
        for key in ("name", "version", "build", "build_number", "depends", "subdir", "md5", "sha256", "size",
                    "timestamp", "license", "arch", "platform"):  # fmt: skip
            assert record.fields[key] == theirs[key], key


def test_record_of_checks_the_expected_sha256(packages: list[Path]) -> None:
    with pytest.raises(UserError, match="does not match the expected"):
        rd.record_of(packages[0], "0" * 64)
    with pytest.raises(UserError, match="not a conda package"):
        rd.record_of(packages[0].with_name("x.zip"))


def test_merge_adds_never_drops_and_refuses_another_file(packages: list[Path]) -> None:
    first, second = (rd.record_of(p) for p in packages)
    current = rd.empty("linux-64")
    current["packages.conda"]["someone-else-1.0-0.conda"] = {"sha256": "c" * 64, "name": "someone-else"}
    merged = rd.merge(current, [first, second])
    assert merged is not None
    assert set(merged["packages.conda"]) == {"someone-else-1.0-0.conda", first.filename}
    assert set(merged["packages"]) == {second.filename}
    assert rd.merge(merged, [first, second]) is None  # nothing to change: nothing to write
    other = rd.Record(first.filename, "linux-64", {**first.fields, "sha256": "d" * 64})
    with pytest.raises(UserError, match="--replace"):
        rd.merge(merged, [other])
    replaced = rd.merge(merged, [other], replace=True)
    assert replaced is not None and replaced["packages.conda"][first.filename]["sha256"] == "d" * 64
    with pytest.raises(UserError, match="not valid JSON"):
        rd.parse(b"{not json", "linux-64", "s3://b/linux-64/repodata.json")


def test_redact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t/value+xyz")
    monkeypatch.setenv("ANACONDA_API_TOKEN", "an-0123456789")
    register("from-a-profile-file")
    text = redact("key s3cr3t/value+xyz token an-0123456789 profile from-a-profile-file")
    assert text == f"key {MASK} token {MASK} profile {MASK}"


def test_local_channel_replace(tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path / "channel")
    wheel = Artifact.of(make_wheel(tmp_path / "a", WHEEL))
    channel.apply(channel.plan([], [wheel]))
    other = Artifact.of(make_wheel(tmp_path / "b", WHEEL, {"torch/__init__.py": b"other\n"}))
    with pytest.raises(UserError, match=r"refusing to overwrite.*--replace"):
        channel.plan([], [other])
    (upload,) = channel.plan([], [other], replace=True)
    assert upload.action == "replaced"
    channel.apply([upload])
    page = (tmp_path / "channel" / "whl" / "simple" / "torch" / "index.html").read_text()
    assert pep503.wheel_links(page) == {WHEEL: other.sha256}


def test_republishing_identical_files_writes_nothing_and_keeps_the_index(packages: list[Path], tmp_path: Path) -> None:
    channel = LocalChannel(tmp_path / "channel")
    conda = [(Artifact.of(packages[0]), "linux-64")]
    wheel = [Artifact.of(make_wheel(tmp_path / "a", WHEEL))]
    channel.apply(channel.plan(conda, wheel))
    files = sorted(p for p in channel.path.rglob("*") if p.is_file())
    written = {p: p.stat().st_mtime_ns for p in files}
    uploads = channel.plan(conda, wheel)
    assert [u.action for u in uploads] == ["unchanged", "unchanged"]
    channel.apply(uploads)
    assert {p: p.stat().st_mtime_ns for p in files} == written  # not re-indexed, no page or sidecar rewritten


@pytest.mark.parametrize("kind", ["conda", "wheel"])
def test_a_channel_file_swapped_under_its_old_size_and_mtime_is_hashed_and_refused(
    packages: list[Path], tmp_path: Path, kind: str
) -> None:
    channel = LocalChannel(tmp_path / "channel")
    conda = [(Artifact.of(packages[0]), "linux-64")]
    wheel = [Artifact.of(make_wheel(tmp_path / "a", WHEEL))]
    channel.apply(channel.plan(conda, wheel))
    target = Path(channel.plan(conda, wheel)[0 if kind == "conda" else 1].destination)
    # Same size, one byte changed, the old mtime put back (as `cp -p` or an unpacked archive would): only the
    # change time, which no tool sets, says the file is not the one the channel recorded.
    info = target.stat()
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    with pytest.raises(UserError, match=rf"refusing to overwrite.*{re.escape(target.name)}"):
        channel.plan(conda, wheel)


def test_a_republish_reads_no_package_the_index_records_as_it_is(
    packages: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check that every package can be indexed opens only those the index does not record as they are: a rerun
    that publishes nothing new reads no package of the channel (each a file opened and its info unpacked)."""
    channel = LocalChannel(tmp_path / "channel")
    conda = [(Artifact.of(packages[0]), "linux-64")]
    channel.apply(channel.plan(conda, []))
    opened: list[str] = []
    real = local.read_package
    monkeypatch.setattr(local, "read_package", lambda path, **kw: opened.append(path.name) or real(path, **kw))
    assert [u.action for u in channel.plan(conda, [])] == ["unchanged"]
    assert opened == []


def test_a_recorded_package_broken_under_its_old_size_and_mtime_is_read_and_refused(
    packages: list[Path], tmp_path: Path
) -> None:
    channel = LocalChannel(tmp_path / "channel")
    conda = [(Artifact.of(packages[0]), "linux-64")]
    channel.apply(channel.plan(conda, []))
    target = channel.path / "linux-64" / packages[0].name
    info = target.stat()
    target.write_bytes(bytes(info.st_size))  # same size, no zip any more; the old mtime put back
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    wheel = [Artifact.of(make_wheel(tmp_path / "a", WHEEL))]
    with pytest.raises(UserError, match=rf"{re.escape(target.name)}: cannot be read.*index was left as it was"):
        channel.plan([], wheel)


def _ci_build(workspace: Path, packages: list[Path], ok: bool = True, conda_status: str = "passed") -> Path:
    """A build/ directory as a CI build job leaves it: the report (the project's writer) and the files below."""
    plan = torch_plan()
    cell_dir = workspace / "build" / plan.cell_id
    wheel = Artifact.of(make_wheel(cell_dir / "repair", plan.root.wheel))
    (cell_dir / "conda").mkdir(parents=True)
    conda = Artifact.of(Path(shutil.copy(packages[0], cell_dir / "conda" / packages[0].name)))
    cell = CellRun(plan=plan)
    cell.records = [StageRecord("repair", "passed", outputs={"repaired_wheel": wheel}),
                    StageRecord("conda", conda_status if ok else "failed", outputs={"conda_package": conda},
                                message="not run: a check")]  # fmt: skip
    report.write([cell], workspace / "build")
    return workspace / "build"


def test_collect_finds_artifacts_below_a_moved_report(packages: list[Path], tmp_path: Path) -> None:
    build = _ci_build(tmp_path / "runner", packages)
    artifacts = tmp_path / "artifacts"
    shutil.move(build, artifacts / "job-1" / "build")  # the paths in the report are now from "another machine"
    cells = collect([artifacts])
    found = cells.found
    assert cells.failed == cells.unverified == []
    assert {(f.kind, f.subdir, f.artifact.path.name) for f in found} == {
        ("conda", "linux-64", packages[0].name),
        ("wheel", "whl", torch_plan().root.wheel),
    }
    assert all(f.artifact.path.is_relative_to(artifacts) for f in found)
    wheel = next(p for p in artifacts.rglob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(UserError, match=re.escape(str(wheel)) + r": sha256 .* does not match .*report\.json"):
        collect([artifacts])


def test_collect_skips_failed_cells_and_refuses_clashing_names(packages: list[Path], tmp_path: Path) -> None:
    build = _ci_build(tmp_path / "failed", packages, ok=False)
    cells = collect([build])
    assert cells.found == [] and len(cells.failed) == 1 and "linux-64-cpu-py3.11" in cells.failed[0]
    copy = tmp_path / "copy" / packages[0].name
    copy.parent.mkdir()
    copy.write_bytes(packages[0].read_bytes())
    assert len(collect([packages[0], copy]).found) == 1  # the same file twice is published once
    with pytest.raises(UserError, match="cannot publish this file"):
        collect([tmp_path / "failed" / "build" / "report.json"])
    with pytest.raises(UserError, match=r"no report\.json below"):
        collect([tmp_path / "copy"])


def _publish_build(build: Path, channel: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`pipeline.py publish BUILD --channel CHANNEL`, as the nightly's publish job runs it."""
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "pipeline.py"), "publish", str(build),
         "--channel", str(channel)],
        cwd=cwd, capture_output=True, text=True, errors="replace", check=False, timeout=120,
    )  # fmt: skip


def test_publish_of_a_build_publishes_an_unverified_cell_marked_so_as_run_does(
    packages: list[Path], tmp_path: Path
) -> None:
    # Before: `run` published an unverified cell (a check could not run), and `publish build/` refused the same cell
    # with "did not pass ... nothing to publish: every cell failed". Now both follow records.reaches_channel.
    build = _ci_build(tmp_path / "job", packages, conda_status="unverified")
    channel = tmp_path / "channel"
    result = _publish_build(build, channel, tmp_path)
    assert result.returncode == EXIT_UNVERIFIED, result.stdout + result.stderr  # as `run` exits
    assert (channel / "linux-64" / packages[0].name).is_file()
    cell = torch_plan().cell_id
    said = [line for line in result.stdout.splitlines() if line.startswith(f"unverified: cell {cell} (")]
    assert len(said) == 1 and said[0].endswith("report.json: conda: not run: a check): published unverified (a check "
                                               "could not run)"), result.stdout  # fmt: skip
    assert "failed" not in result.stdout + result.stderr and "did not pass" not in result.stderr
    assert reaches_channel("unverified") and reaches_channel("passed") and not reaches_channel("failed")


def test_locate_uses_the_longest_tail_that_exists(tmp_path: Path) -> None:
    report_path = tmp_path / "build" / "report.json"
    target = tmp_path / "build" / "cell" / "conda" / "p.conda"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"x")
    assert locate("/home/runner/work/repo/repo/build/cell/conda/p.conda", report_path) == target
    assert locate("D:\\a\\repo\\build\\cell\\conda\\p.conda", report_path) == target  # a Windows job's report
    assert locate("/elsewhere/q.conda", report_path) is None


def test_publish_names_the_report_and_cell_of_a_bad_entry(packages: list[Path], tmp_path: Path) -> None:
    """A report from another version (an artifact without 'size'), or a hand-edited one: exit 2, the report and the
    cell named, no traceback, nothing published."""
    build = _ci_build(tmp_path / "job", packages)
    report_path = build / "report.json"
    data = json.loads(report_path.read_text())
    (cell,) = data["cells"]
    del cell["artifacts"]["conda_package"]["size"]
    report_path.write_text(json.dumps(data))
    channel = tmp_path / "channel"
    result = _publish_build(build, channel, tmp_path)
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    message = " ".join(result.stderr.split())  # the console may wrap long lines
    assert f"cell {cell['cell_id']}'s conda entry lacks a valid 'size'" in message
    assert "report.json" in message
    assert not channel.exists()
    broken = {
        "cell 1 is not a cell object": ["not a cell"],
        "'cells' is not a list": "not a list",
        "'artifacts' is not an object": [{**cell, "artifacts": []}],
        "wheel entry lacks a valid 'path' (a file path), 'sha256' (64 hex digits), 'size'": [
            {**cell, "artifacts": {"repaired_wheel": {"path": 1, "sha256": "x", "size": "1"}}}
        ],
    }
    for expected, cells in broken.items():
        report_path.write_text(json.dumps({**data, "cells": cells}))
        with pytest.raises(UserError, match=re.escape(f"{report_path}: ") + ".*" + re.escape(expected)):
            collect([build])


def test_the_rattler_child_imports_this_checkout_of_torchbuild() -> None:
    """py-rattler runs in a child process; it must import the torchbuild it was started from (a second checkout or a
    CI clone beside an installed one), so PYTHONPATH starts with the folder that holds this package."""
    import torchbuild
    from torchbuild.conda import rattler_child

    first = rattler_child._child_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert Path(first) == Path(torchbuild.__file__).resolve().parent.parent
