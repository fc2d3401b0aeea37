"""S3 test bench: moto's real HTTP server, a fault-injecting HTTP proxy in front of it, the build/ directory a CI
build job uploads (made by the project's own conda stage and report writer), and the two installers.

The proxy is a fake network, named so: it forwards every request to moto unchanged, except the ones a rule picks,
which it answers with a 503, cuts off half-way through the body, holds (so a test can kill the publisher there), or
pauses (forwarded once the test releases it, so a test can let another publisher act in between).

Every publishing process these helpers run is checked for the test credentials: in what it printed and in every file
below its working directory.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from tests.builders import source_info, torch_plan
from tests.integration.support_conda import tiny_torch_wheel
from torchbuild.config.options import RunOptions
from torchbuild.results import Artifact
from torchbuild.run import report
from torchbuild.run.records import CellRun, StageRecord
from torchbuild.stages import Context
from torchbuild.stages.conda import stage as conda_stage

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY = "AKIATORCHBUILDTEST01"
SECRET_KEY = "tbSecret/DoNotLeak+0123456789abcdefghijklm"
PUBLIC_READ = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::{}/*"}],
}

Action = Literal["503", "reset", "hold", "pause", "wait_for_reads"]


@dataclass
class Rule:
    """Requests whose method is ``method`` and whose path+query contains ``match``: the first ``skip`` pass, then
    ``times`` get ``action``."""

    method: str
    match: str
    action: Action
    times: int = 1
    skip: int = 0
    reads: int = 2  # wait_for_reads: hold the write until this many GETs of the same path were answered
    seen: int = 0
    fired: int = 0
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def picks(self, method: str, path: str) -> bool:
        if method != self.method or self.match not in path:
            return False
        self.seen += 1
        if self.seen <= self.skip or self.fired >= self.times:
            return False
        self.fired += 1
        return True


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.rules: list[Rule] = []
        self.log: list[tuple[str, str, int]] = []  # (method, path, status answered)
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, rule: Rule) -> Rule:
        with self.lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self.lock:
            for rule in self.rules:
                rule.release.set()
            self.rules.clear()
            self.log.clear()

    def statuses(self, method: str, match: str) -> list[int]:
        return [status for m, path, status in self.log if m == method and match in path]

    def reads_of(self, path: str) -> int:
        return sum(1 for m, p, status in self.log if m == "GET" and p == path and status < 500)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        method, path = request.command, request.path
        with self.lock:
            rule = next((r for r in self.rules if r.picks(method, path)), None)
        length = int(request.headers.get("Content-Length") or 0)
        if rule is not None and rule.action == "reset":
            request.rfile.read(length // 2)  # half the body arrives, then the connection drops
            self._record(method, path, 0)
            request.close_connection = True
            request.connection.shutdown(2)
            return
        body = request.rfile.read(length) if length else b""
        if rule is not None and rule.action == "503":
            self._answer(request, 503, b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>")
            self._record(method, path, 503)
            return
        if rule is not None and rule.action == "hold":
            rule.held.set()
            rule.release.wait(60)
            self._record(method, path, 0)
            request.close_connection = True
            request.connection.shutdown(2)
            return
        if rule is not None and rule.action == "pause":
            rule.held.set()
            rule.release.wait(60)
        if rule is not None and rule.action == "wait_for_reads":
            plain = path.split("?")[0]
            deadline = time.monotonic() + 20
            while self.reads_of(plain) < rule.reads and time.monotonic() < deadline:
                time.sleep(0.05)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("connection", "keep-alive")}
        upstream = http.client.HTTPConnection(self.upstream, timeout=60)
        upstream.request(method, path, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        request.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                request.send_header(key, value)
        if method == "HEAD":
            request.send_header("Content-Length", response.getheader("Content-Length") or "0")
            request.end_headers()
        else:
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        upstream.close()
        self._record(method, path, response.status)

    def _answer(self, request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "application/xml")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def _record(self, method: str, path: str, status: int) -> None:
        with self.lock:
            self.log.append((method, path, status))

    def stop(self) -> None:
        self.clear()
        self.server.shutdown()
        self.server.server_close()


def s3_env(endpoint: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a publishing process: the standard AWS variables, nothing else AWS-related."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_CONFIG_FILE=str(home / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
        COLUMNS="200",
        **extra,
    )
    return env


def assert_no_credentials(output: str, *roots: Path) -> None:
    """Neither test credential is in ``output`` nor in any file below ``roots``."""
    assert SECRET_KEY not in output and ACCESS_KEY not in output, f"a credential was printed:\n{output}"
    for path, text in all_text(*roots):
        assert SECRET_KEY not in text and ACCESS_KEY not in text, f"a credential is in {path}"


def pipeline(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(ROOT / "pipeline.py"), *map(str, args)],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert_no_credentials(result.stdout + result.stderr, cwd)
    return result


def start_pipeline(*args: str | Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "pipeline.py"), *map(str, args)],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], cwd: Path, timeout: float = 120) -> tuple[str, str]:
    """Wait for a process ``start_pipeline`` started (or killed); its (stdout, stderr), checked for credentials."""
    stdout, stderr = proc.communicate(timeout=timeout)
    assert_no_credentials(stdout + stderr, cwd)
    return stdout, stderr


@dataclass(frozen=True)
class JobBuild:
    """One CI build job's build/ directory: report.json and the cell's artifacts below it."""

    build: Path
    conda: Artifact
    wheel: Artifact


def job_build(workspace: Path, python: str, padding: int = 0) -> JobBuild:
    """Run the project's conda stage on a small torch wheel of the cell (``padding`` bytes of random data make it
    big enough for a multipart upload), and write the cell's report as the runner does."""
    plan = torch_plan(python=python)
    wheel_dir = workspace / "build" / plan.cell_id / "repair"
    files = {"torch/__init__.py": f"__version__ = '{plan.version}'\n".encode()}
    if padding:
        files["torch/lib/blob.bin"] = os.urandom(padding)
    wheel_path = tiny_torch_wheel(wheel_dir, plan) if not padding else _padded_wheel(wheel_dir, plan, files)
    wheel = Artifact.of(wheel_path)
    inputs = {"repaired_wheel": wheel, "source_info": source_info(workspace / "source", wheel_path)}
    ctx = Context(plan=plan, root=workspace, options=RunOptions(), inputs=inputs)
    conda = conda_stage.run(ctx).outputs["conda_package"]
    cell = CellRun(plan=plan)
    cell.records = [
        StageRecord(stage="repair", status="passed", outputs={"repaired_wheel": wheel}),
        StageRecord(stage="conda", status="passed", outputs={"conda_package": conda}),
    ]
    report.write([cell], workspace / "build")
    return JobBuild(build=workspace / "build", conda=conda, wheel=wheel)


def _padded_wheel(directory: Path, plan: Any, files: dict[str, bytes]) -> Path:
    from tests.builders import make_wheel

    return make_wheel(directory, plan.root.wheel, files)


def bucket_state(client: Any, bucket: str) -> dict[str, str]:
    """Every object with its ETag: 'the channel is exactly as it was'."""
    state: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            state[obj["Key"]] = obj["ETag"]
    return state


def repodata(client: Any, bucket: str, key: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return data


def consistent(client: Any, bucket: str, prefix: str) -> list[str]:
    """Everything an index names that is not there (empty: the channel is consistent)."""
    from torchbuild.channels import pep503

    keys = set(bucket_state(client, bucket))
    missing = []
    for key in sorted(keys):
        if key.endswith("/repodata.json"):
            subdir = key.rsplit("/", 1)[0]
            data = repodata(client, bucket, key)
            for section in ("packages", "packages.conda"):
                missing += [f"{subdir}/{name}" for name in data.get(section, {}) if f"{subdir}/{name}" not in keys]
        elif key.endswith("/index.html") and "/whl/simple/" in key and key.count("/") > prefix.count("/") + 3:
            directory = key.rsplit("/", 1)[0]
            page = client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
            missing += [f"{directory}/{n}" for n in pep503.wheel_links(page) if f"{directory}/{n}" not in keys]
    return missing


INSTALL_SCRIPT = """
import asyncio, os, sys
from pathlib import Path
from rattler import BuildString, Gateway, GenericVirtualPackage, MatchSpec, PackageName, Version, install, solve

channel, conda_forge, prefix, cache = sys.argv[1:5]

async def main():
    virtual = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
               for n, v in [("__unix", "0"), ("__linux", "6.1"), ("__glibc", "2.36")]]
    records = await solve([channel, conda_forge], [MatchSpec(s, strict=False) for s in sys.argv[5:]],
                          platforms=["linux-64", "noarch"], virtual_packages=virtual,
                          gateway=Gateway(cache_dir=Path(cache)))
    for r in records:
        if r.channel.rstrip("/") == channel.rstrip("/"):
            print("solved", r.name.normalized, r.version, r.build, r.url)
    ours = [r for r in records if r.channel.rstrip("/") == channel.rstrip("/")]
    await install(ours, target_prefix=prefix, cache_dir=Path(cache) / "pkgs", show_progress=False)
    print("installed", len(ours))

asyncio.run(main())
sys.stdout.flush()
os._exit(0)  # py-rattler can crash at interpreter exit (see torchbuild/conda/rattler_child.py)
"""


def rattler_install(channel: str, conda_forge: Path, prefix: Path, *specs: str) -> subprocess.CompletedProcess[str]:
    """py-rattler solves ``specs`` against the channel's URL (and the real conda-forge repodata, which has no package
    files: only the channel's own packages are installed) and installs them into ``prefix``."""
    script = prefix.parent / "rattler_install.py"
    script.write_text(INSTALL_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), channel, conda_forge.as_uri(), str(prefix), str(prefix.parent / "rattler-cache"),
         *specs],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip


def pip_install(index: str, target: Path, requirement: str = "torch") -> tuple[subprocess.CompletedProcess[str], Any]:
    """pip, with no configuration but the index (--isolated: the machine's pip.conf finds a real torch elsewhere)."""
    report_path = target.parent / f"pip-report-{target.name}.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--disable-pip-version-check",
         "--no-deps", "--index-url", index, "--target", str(target), "--report", str(report_path), requirement],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip
    installed = json.loads(report_path.read_text())["install"] if report_path.is_file() else []
    return result, installed


def all_text(*roots: Path) -> Iterator[tuple[Path, str]]:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and path.stat().st_size < 5_000_000:
                yield path, path.read_text(encoding="utf-8", errors="replace")
