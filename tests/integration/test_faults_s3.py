"""Fault suite, S3 channels (moto's real server): concurrent publishers of one name with other bytes. One wins
whole; the other is refused naming the file, and nothing the index or a wheel page names disagrees with the bytes
under that name (before: a page's #sha256 could name one publisher's wheel while the object was the other's)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Scratch
from tests.integration.support_faults import Build, outputs, publish_argv, small_build
from tests.integration.support_s3 import ACCESS_KEY, SECRET_KEY, bucket_state, consistent, s3_env
from torchbuild.channels import pep503

TRIALS = 4
PREFIX = "nightly"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY)  # fmt: skip
    yield endpoint, client
    server.stop()


@pytest.fixture(scope="module")
def builds(module_scratch: Scratch) -> dict[str, Build]:
    root = module_scratch("builds")
    return {name: small_build(root / name, name, padding=4 << 20) for name in ("a", "b")}


def _object(client: Any, bucket: str, key: str) -> bytes:
    data: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def test_concurrent_s3_publishers_of_one_name_one_wins_whole(
    moto: tuple[str, Any], builds: dict[str, Build], tmp_path: Path
) -> None:
    endpoint, client = moto
    env = s3_env(endpoint, tmp_path)
    for trial in range(TRIALS):
        bucket = f"tb-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        channel = f"s3://{bucket}/{PREFIX}"
        procs = {name: subprocess.Popen(publish_argv(channel, *builds[name].files), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
                 for name in ("a", "b")}  # fmt: skip
        results = {name: subprocess.CompletedProcess(p.args, p.wait(300), *p.communicate())
                   for name, p in procs.items()}  # fmt: skip
        codes = sorted(r.returncode for r in results.values())
        assert codes == [0, 2], outputs(list(results.values()))
        (winner,) = [name for name, r in results.items() if r.returncode == 0]
        loser = results["b" if winner == "a" else "a"]
        assert "Traceback" not in loser.stderr and builds[winner].conda.name in loser.stderr, loser.stderr
        assert consistent(client, bucket, PREFIX) == [], f"trial {trial}"
        conda_key = f"{PREFIX}/linux-64/{builds[winner].conda.name}"
        wheel_key = f"{PREFIX}/whl/simple/torch/{builds[winner].wheel.name}"
        assert _object(client, bucket, conda_key) == builds[winner].conda.read_bytes()
        assert _object(client, bucket, wheel_key) == builds[winner].wheel.read_bytes()
        index = json.loads(_object(client, bucket, f"{PREFIX}/linux-64/repodata.json"))
        digest = hashlib.sha256(builds[winner].conda.read_bytes()).hexdigest()
        assert index["packages.conda"][builds[winner].conda.name]["sha256"] == digest
        page = _object(client, bucket, f"{PREFIX}/whl/simple/torch/").decode()
        wheel_digest = hashlib.sha256(builds[winner].wheel.read_bytes()).hexdigest()
        assert pep503.wheel_links(page) == {builds[winner].wheel.name: wheel_digest}
        assert f"{wheel_key}.sha256" not in bucket_state(client, bucket) or _object(
            client, bucket, f"{wheel_key}.sha256"
        ).decode().split()[0] == wheel_digest
