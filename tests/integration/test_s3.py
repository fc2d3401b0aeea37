"""Publishing to S3, against moto's real HTTP server, as a CI publish job runs it:
``python pipeline.py publish artifacts --channel s3://bucket/prefix``.

After every scenario the channel is checked as its users see it: nothing an index names is missing, py-rattler
solves and installs pytorch from the channel's HTTP URL, and pip installs the wheel from its simple index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPODATA, Scratch
from tests.integration.support_s3 import (
    ACCESS_KEY,
    PUBLIC_READ,
    SECRET_KEY,
    FaultProxy,
    JobBuild,
    Rule,
    assert_no_credentials,
    bucket_state,
    consistent,
    finish,
    job_build,
    pip_install,
    pipeline,
    rattler_install,
    repodata,
    s3_env,
    start_pipeline,
)
from torchbuild.results import Artifact

pytestmark = pytest.mark.slow

PREFIX = "nightly"


@pytest.fixture(scope="session")
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(moto_endpoint)
    yield fault_proxy
    fault_proxy.stop()


@pytest.fixture(autouse=True)
def _no_rules_left(proxy: FaultProxy) -> Iterator[None]:
    proxy.clear()
    yield
    proxy.clear()


@dataclass(frozen=True)
class Jobs:
    """artifacts/<job>/build/... as the publish job downloads it; the builds were made elsewhere (moved here)."""

    artifacts: Path
    py311: JobBuild
    py312: JobBuild
    big: JobBuild  # bigger than one multipart part


@pytest.fixture(scope="module")
def jobs(module_scratch: Scratch) -> Jobs:
    machine = module_scratch("ci-machine")
    artifacts = module_scratch("publish-job") / "artifacts"
    built = {name: job_build(machine / name, python) for name, python in (("py311", "3.11"), ("py312", "3.12"))}
    built["big"] = job_build(machine / "big", "3.10", padding=12 << 20)
    moved = {}
    for name, build in built.items():
        target = artifacts / f"build-{name}" / "build"
        shutil.move(build.build, target)  # the report's absolute paths no longer exist: as on the publish runner
        moved[name] = build
    return Jobs(artifacts=artifacts, py311=moved["py311"], py312=moved["py312"], big=moved["big"])


def job(jobs: Jobs, name: str) -> Path:
    return jobs.artifacts / f"build-{name}"


@dataclass(frozen=True)
class Bucket:
    name: str
    client: Any
    endpoint: str  # moto, read directly (installers)
    env: dict[str, str]  # the publisher's, through the fault proxy
    workspace: Path

    @property
    def channel(self) -> str:
        return f"s3://{self.name}/{PREFIX}"

    @property
    def http(self) -> str:
        return f"{self.endpoint}/{self.name}/{PREFIX}"

    def publish(self, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return pipeline(*args, env=env or self.env, cwd=self.workspace)

    def state(self) -> dict[str, str]:
        return bucket_state(self.client, self.name)


@pytest.fixture
def bucket(moto_endpoint: str, proxy: FaultProxy, tmp_path: Path) -> Bucket:
    import boto3

    name = f"tb-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)  # fmt: skip
    client.create_bucket(Bucket=name)
    policy = json.loads(json.dumps(PUBLIC_READ).replace("{}", name))
    client.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))  # installers read anonymously, as from a CDN
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Bucket(name, client, moto_endpoint, s3_env(proxy.url, tmp_path), workspace)


def assert_installable(bucket: Bucket, tmp_path: Path, python: str = "3.11") -> None:
    """The channel as its users see it: consistent, and both installers get pytorch/torch from it."""
    assert consistent(bucket.client, bucket.name, PREFIX) == []
    if not REPODATA.is_dir():
        pytest.skip(f"skipped: the real repodata is not at {REPODATA}")
    tag = uuid.uuid4().hex[:6]
    prefix = tmp_path / f"prefix-{tag}"
    solved = rattler_install(bucket.http, REPODATA / "conda-forge", prefix, "pytorch", f"python {python}.*")
    assert solved.returncode == 0, solved.stdout + solved.stderr
    cpython = python.replace(".", "")
    assert f"solved pytorch 2.13.0 py{python}_cpu_0 {bucket.http}/linux-64/" in solved.stdout
    assert "installed 1" in solved.stdout
    assert (prefix / "conda-meta" / f"pytorch-2.13.0-py{python}_cpu_0.json").is_file()
    site = prefix / "lib" / f"python{python}" / "site-packages" / "torch" / "__init__.py"
    assert "2.13.0+cpu" in site.read_text()
    if python == f"{sys.version_info.major}.{sys.version_info.minor}":
        result, installed = pip_install(f"{bucket.http}/whl/simple", tmp_path / f"pip-{tag}")
        assert result.returncode == 0, result.stdout + result.stderr
        (item,) = installed
        assert item["metadata"]["version"] == "2.13.0+cpu"
        assert item["download_info"]["url"].startswith(f"{bucket.http}/whl/simple/torch/torch-2.13.0")
        assert item["download_info"]["url"].endswith(f"-cp{cpython}-cp{cpython}-manylinux_2_28_x86_64.whl")


def test_publish_republish_and_reindex(bucket: Bucket, jobs: Jobs, tmp_path: Path) -> None:
    first = bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel)
    assert first.returncode == 0, first.stderr
    conda, wheel = jobs.py311.conda.path.name, jobs.py311.wheel.path.name
    assert f"new       linux-64/{conda}  sha256 {jobs.py311.conda.sha256}" in first.stdout
    assert f"new       whl/simple/torch/{wheel}" in first.stdout
    publisher_endpoint = bucket.env["AWS_ENDPOINT_URL_S3"]
    assert f"conda install -c {publisher_endpoint}/{bucket.name}/{PREFIX} pytorch" in first.stdout
    head = bucket.client.head_object(Bucket=bucket.name, Key=f"{PREFIX}/linux-64/{conda}")
    assert head["Metadata"]["sha256"] == jobs.py311.conda.sha256
    record = repodata(bucket.client, bucket.name, f"{PREFIX}/linux-64/repodata.json")["packages.conda"][conda]
    assert (record["sha256"], record["size"], record["build"]) == (jobs.py311.conda.sha256, jobs.py311.conda.size,
                                                                   "py3.11_cpu_0")  # fmt: skip
    assert repodata(bucket.client, bucket.name, f"{PREFIX}/noarch/repodata.json")["packages"] == {}
    page_keys = [f"{PREFIX}/whl/simple/torch/", f"{PREFIX}/whl/simple/torch/index.html"]
    pages = {bucket.client.get_object(Bucket=bucket.name, Key=k)["Body"].read() for k in page_keys}
    assert len(pages) == 1 and f"#sha256={jobs.py311.wheel.sha256}".encode() in pages.pop()
    assert_installable(bucket, tmp_path)

    before = bucket.state()
    again = bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("unchanged") == 2
    assert bucket.state() == before  # a no-op: not one object rewritten

    reindex = bucket.publish("index", "--channel", bucket.channel)
    assert reindex.returncode == 0, reindex.stderr
    assert "linux-64: 1 packages" in reindex.stdout and "whl/torch: 1 wheels" in reindex.stdout
    assert bucket.state() == before


def test_a_different_file_under_a_published_name(bucket: Bucket, jobs: Jobs, tmp_path: Path) -> None:
    assert bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel).returncode == 0
    rebuilt = job_build(tmp_path / "rebuild", "3.11", padding=1)  # same names, other bytes
    before = bucket.state()
    refused = bucket.publish("publish", rebuilt.build, "--channel", bucket.channel)
    assert refused.returncode == 2
    assert "refusing to overwrite" in refused.stderr and rebuilt.conda.path.name in refused.stderr
    assert "--replace" in refused.stderr and "Traceback" not in refused.stderr
    assert bucket.state() == before

    replaced = bucket.publish("publish", rebuilt.build, "--channel", bucket.channel, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert replaced.stdout.count("replaced") == 2
    record = repodata(bucket.client, bucket.name, f"{PREFIX}/linux-64/repodata.json")["packages.conda"]
    assert record[rebuilt.conda.path.name]["sha256"] == rebuilt.conda.sha256
    assert_installable(bucket, tmp_path)


def test_replace_reaches_the_index_of_a_missing_object(bucket: Bucket, jobs: Jobs, tmp_path: Path) -> None:
    """The index lists a package whose object is gone (deleted by hand): with --replace, another file under the name
    goes up and the index lists it, as for a file that is there."""
    assert bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel).returncode == 0
    rebuilt = job_build(tmp_path / "rebuild", "3.11", padding=1)
    bucket.client.delete_object(Bucket=bucket.name, Key=f"{PREFIX}/linux-64/{rebuilt.conda.path.name}")
    refused = bucket.publish("publish", rebuilt.conda.path, "--channel", bucket.channel)
    assert refused.returncode == 2 and "--replace" in refused.stderr, refused.stderr
    replaced = bucket.publish("publish", rebuilt.conda.path, "--channel", bucket.channel, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert f"new       linux-64/{rebuilt.conda.path.name}" in replaced.stdout
    listed = repodata(bucket.client, bucket.name, f"{PREFIX}/linux-64/repodata.json")["packages.conda"]
    assert listed[rebuilt.conda.path.name]["sha256"] == rebuilt.conda.sha256
    assert consistent(bucket.client, bucket.name, PREFIX) == []


def test_a_publisher_replacing_the_object_before_the_index_is_written(
    bucket: Bucket, jobs: Jobs, proxy: FaultProxy
) -> None:
    """Between this publisher's verified upload and its index write, another one puts other bytes under the name
    (a stand-in for the other publisher's upload: a plain PUT with its sha256): the index must not name them with
    this publisher's sha256."""
    conda = jobs.py311.conda.path.name
    key = f"{PREFIX}/linux-64/{conda}"
    # The first read of the index is the clash check before any upload; the second is the merge.
    rule = proxy.add(Rule("GET", f"/{bucket.name}/{PREFIX}/linux-64/repodata.json", "pause", skip=1))
    proc = start_pipeline("publish", job(jobs, "py311"), "--channel", bucket.channel, env=bucket.env,
                          cwd=bucket.workspace)  # fmt: skip
    _held(proxy, rule, proc)
    other = os.urandom(1000)
    bucket.client.put_object(Bucket=bucket.name, Key=key, Body=other,
                             Metadata={"sha256": hashlib.sha256(other).hexdigest()})  # fmt: skip
    before = bucket.state()
    rule.release.set()
    _stdout, stderr = finish(proc, bucket.workspace)
    assert proc.returncode == 2, stderr
    assert f"s3://{bucket.name}/{key}" in stderr and "another publisher replaced" in stderr, stderr
    assert "Traceback" not in stderr
    assert bucket.state() == before  # no index names it


def test_reindex_keeps_what_a_concurrent_publisher_adds(bucket: Bucket, jobs: Jobs, proxy: FaultProxy) -> None:
    """``index`` lists the bucket, then a publisher adds py3.12 before the index's write lands: the write fails with
    412, and the rebuild on the new content keeps the publisher's package and wheel."""
    assert bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel).returncode == 0
    bucket.client.delete_object(Bucket=bucket.name, Key=f"{PREFIX}/linux-64/repodata.json")  # index has work to do
    rule = proxy.add(Rule("PUT", f"/{bucket.name}/{PREFIX}/linux-64/repodata.json", "pause"))
    proc = start_pipeline("index", "--channel", bucket.channel, env=bucket.env, cwd=bucket.workspace)
    _held(proxy, rule, proc)
    published = bucket.publish("publish", job(jobs, "py312"), "--channel", bucket.channel)
    assert published.returncode == 0, published.stderr
    rule.release.set()
    _stdout, stderr = finish(proc, bucket.workspace)
    assert proc.returncode == 0, stderr
    assert 412 in proxy.statuses("PUT", "/linux-64/repodata.json")
    listed = repodata(bucket.client, bucket.name, f"{PREFIX}/linux-64/repodata.json")["packages.conda"]
    assert set(listed) == {jobs.py311.conda.path.name, jobs.py312.conda.path.name}
    page = bucket.client.get_object(Bucket=bucket.name, Key=f"{PREFIX}/whl/simple/torch/")["Body"].read().decode()
    assert jobs.py311.wheel.sha256 in page and jobs.py312.wheel.sha256 in page
    assert consistent(bucket.client, bucket.name, PREFIX) == []


def test_two_publishers_at_once_both_end_up_in_the_index(
    bucket: Bucket, jobs: Jobs, proxy: FaultProxy, tmp_path: Path
) -> None:
    # Each publisher reads the index twice before its first write (checking for clashes, then merging); both
    # writes wait until all four reads are done: a guaranteed lost update, unless the writes are conditional.
    proxy.add(Rule("PUT", f"/{bucket.name}/{PREFIX}/linux-64/repodata.json", "wait_for_reads", times=2, reads=4))
    procs = [
        start_pipeline("publish", job(jobs, name), "--channel", bucket.channel, env=bucket.env, cwd=bucket.workspace)
        for name in ("py311", "py312")
    ]
    outputs = [finish(proc, bucket.workspace) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert 412 in proxy.statuses("PUT", "/linux-64/repodata.json")  # one lost the race, and merged again
    assert any("changed by another publisher meanwhile; merging again" in e for _o, e in outputs)
    listed = repodata(bucket.client, bucket.name, f"{PREFIX}/linux-64/repodata.json")["packages.conda"]
    assert set(listed) == {jobs.py311.conda.path.name, jobs.py312.conda.path.name}
    page = bucket.client.get_object(Bucket=bucket.name, Key=f"{PREFIX}/whl/simple/torch/")["Body"].read().decode()
    assert jobs.py311.wheel.sha256 in page and jobs.py312.wheel.sha256 in page
    assert_installable(bucket, tmp_path, "3.11")
    assert_installable(bucket, tmp_path, "3.12")


def test_transient_errors_are_retried(bucket: Bucket, jobs: Jobs, proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.add(Rule("PUT", f"/linux-64/{jobs.py311.conda.path.name}", "503", times=2))
    proxy.add(Rule("PUT", ".whl", "reset"))  # the connection drops half-way through the wheel's body
    proxy.add(Rule("GET", "/linux-64/repodata.json", "503"))
    result = bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel)
    assert result.returncode == 0, result.stderr
    assert proxy.statuses("PUT", f"/linux-64/{jobs.py311.conda.path.name}")[:3] == [503, 503, 200]
    assert proxy.statuses("PUT", ".whl")[:2] == [0, 200]  # 0: dropped
    assert_installable(bucket, tmp_path)


def _held(proxy: FaultProxy, rule: Rule, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not rule.held.wait(0.2):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the publisher never reached the held request"


def test_killed_between_packages_and_index(bucket: Bucket, jobs: Jobs, proxy: FaultProxy, tmp_path: Path) -> None:
    rule = proxy.add(Rule("PUT", "/linux-64/repodata.json", "hold"))
    proc = start_pipeline("publish", job(jobs, "py311"), "--channel", bucket.channel, env=bucket.env,
                          cwd=bucket.workspace)  # fmt: skip
    _held(proxy, rule, proc)
    proc.kill()  # SIGKILL on POSIX, TerminateProcess on Windows: no cleanup runs
    finish(proc, bucket.workspace)
    state = bucket.state()
    assert f"{PREFIX}/linux-64/{jobs.py311.conda.path.name}" in state  # the package went up ...
    assert f"{PREFIX}/linux-64/repodata.json" not in state  # ... the index never named it
    assert consistent(bucket.client, bucket.name, PREFIX) == []
    proxy.clear()
    rerun = bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel)
    assert rerun.returncode == 0, rerun.stderr
    assert "unchanged linux-64/" in rerun.stdout  # the package is not sent again; the index is completed
    assert_installable(bucket, tmp_path)


def test_multipart_upload_interrupted_then_completed(
    bucket: Bucket, jobs: Jobs, proxy: FaultProxy, tmp_path: Path
) -> None:
    env = {**bucket.env, "TORCHBUILD_S3_PART_MB": "5"}
    big = job(jobs, "big")
    conda_key = f"{PREFIX}/linux-64/{jobs.big.conda.path.name}"
    # 1. An upload that keeps failing half-way: clear error, and nothing of it is visible.
    proxy.add(Rule("PUT", "partNumber=2", "reset", times=100))
    failed = bucket.publish("publish", big, "--channel", bucket.channel, env={**env, "AWS_MAX_ATTEMPTS": "2"})
    assert failed.returncode == 2, failed.stderr
    assert "uploading" in failed.stderr and "Traceback" not in failed.stderr
    assert bucket.state() == {}
    proxy.clear()
    # 2. Killed in the middle of the parts.
    rule = proxy.add(Rule("PUT", "partNumber=2", "hold"))
    proc = start_pipeline("publish", big, "--channel", bucket.channel, env=env, cwd=bucket.workspace)
    _held(proxy, rule, proc)
    proc.kill()
    finish(proc, bucket.workspace)
    assert conda_key not in bucket.state() and consistent(bucket.client, bucket.name, PREFIX) == []
    proxy.clear()
    # 3. The same command again completes it.
    done = bucket.publish("publish", big, "--channel", bucket.channel, env=env)
    assert done.returncode == 0, done.stderr
    assert f"uploading {jobs.big.conda.path.name}: 100% of" in done.stderr
    assert len([s for m, p, s in proxy.log if m == "PUT" and "partNumber=" in p and conda_key in p]) >= 3
    assert_installable(bucket, tmp_path, "3.10")


def test_bad_input_leaves_the_channel_unchanged(bucket: Bucket, jobs: Jobs, tmp_path: Path) -> None:
    assert bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel).returncode == 0
    before = bucket.state()
    tampered = tmp_path / "tampered"
    shutil.copytree(job(jobs, "py312"), tampered)
    wheel = next(tampered.rglob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    cases = {
        ("publish", tampered): (2, f"{wheel}: sha256"),
        ("publish", job(jobs, "py312"), "--channel", f"s3://tb-no-such-bucket-{uuid.uuid4().hex[:6]}/x"):
            (2, "does not exist"),
        ("publish", job(jobs, "py312"), "--channel", "ftp://host/channel"): (2, "Unknown channel scheme 'ftp://'"),
        ("publish", job(jobs, "py312"), "--channel", "s3://Bad_Bucket/x"): (2, "not a valid S3 bucket name"),
        ("publish", tmp_path / "missing"): (2, "no such file or directory"),
    }  # fmt: skip
    for args, (code, message) in cases.items():
        full = [*args, "--channel", bucket.channel] if "--channel" not in args else list(args)
        result = bucket.publish(*full)
        assert result.returncode == code, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert bucket.state() == before


@pytest.fixture(scope="session")
def strict_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second moto server that checks credentials (it knows none, so every key is wrong)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(10)


def test_wrong_credentials(strict_moto: str, jobs: Jobs, tmp_path: Path) -> None:
    env = s3_env(strict_moto, tmp_path)
    result = pipeline("publish", job(jobs, "py311"), "--channel", "s3://tb-any/nightly", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "the AWS credentials were refused" in result.stderr and "Traceback" not in result.stderr


def test_the_publish_stage_of_a_run(
    bucket: Bucket, jobs: Jobs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``pipeline.py run --channel s3://...``: the runner with the real publish stage (the stages before it are
    stand-ins that hand over the job's artifacts), its reports, and a refusal recorded as a failed stage."""
    from dataclasses import replace

    from tests.builders import torch_plan
    from torchbuild.config.options import RunOptions
    from torchbuild.results import StageResult
    from torchbuild.run import runner

    for key, value in bucket.env.items():
        monkeypatch.setenv(key, value)
    # The job's artifacts were moved after its report was written: take them from the artifacts directory.
    handed = {k: Artifact.of(next(jobs.artifacts.rglob(a.path.name))) for k, a in
              (("source_wheel", jobs.py311.wheel), ("built_wheel", jobs.py311.wheel),
               ("repaired_wheel", jobs.py311.wheel), ("conda_package", jobs.py311.conda))}  # fmt: skip

    def hand_over(name: str) -> runner.StageFunction:
        return lambda _ctx: StageResult(outputs={name: handed[name]} if name in handed else {})

    stand_ins = {stage: hand_over(name) for stage, name in (("source", "source_wheel"), ("build", "built_wheel"),
                                                             ("repair", "repaired_wheel"), ("conda", "conda_package"),
                                                             ("verify", ""), ("smoke-wheel", ""),
                                                             ("smoke-conda", ""))}
    plan = replace(torch_plan(), channel=bucket.channel)
    workspace = tmp_path / "run"
    code = runner.run([plan], root=workspace, options=RunOptions(), stages=stand_ins)
    assert code == 0
    (cell,) = json.loads((workspace / "build" / "report.json").read_text())["cells"]
    publish = cell["stages"][-1]
    assert publish["status"] == "passed" and publish["message"].startswith(bucket.env["AWS_ENDPOINT_URL_S3"])
    assert f"linux-64/{jobs.py311.conda.path.name} (new)" in publish["message"]
    assert_installable(bucket, tmp_path)
    # Someone else's file under the name: the stage fails, the report says why, the channel is unchanged.
    other = job_build(tmp_path / "other", "3.11", padding=1)
    handed = {"repaired_wheel": other.wheel, "conda_package": other.conda}
    before = bucket.state()
    assert runner.run([plan], root=workspace, options=RunOptions(force=True), stages=stand_ins) == 1
    (cell,) = json.loads((workspace / "build" / "report.json").read_text())["cells"]
    assert cell["stages"][-1]["status"] == "failed" and "refusing to overwrite" in cell["stages"][-1]["message"]
    assert bucket.state() == before
    captured = capsys.readouterr()
    assert_no_credentials(captured.out + captured.err, workspace)


def test_no_credential_in_any_output_or_file(bucket: Bucket, jobs: Jobs, tmp_path: Path) -> None:
    """Every publishing call is checked by the helpers that run it; this one also reads everything around it: the
    whole test directory, the job's artifacts and every object the publish wrote."""
    result = bucket.publish("publish", job(jobs, "py311"), "--channel", bucket.channel)
    assert result.returncode == 0, result.stderr
    assert_no_credentials(result.stdout + result.stderr, tmp_path, jobs.artifacts)
    state = bucket.state()
    assert f"{PREFIX}/linux-64/repodata.json" in state
    for key in state:
        body = bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read()
        assert SECRET_KEY.encode() not in body and ACCESS_KEY.encode() not in body, key
