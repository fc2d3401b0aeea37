"""Nightlies on S3, against moto's real HTTP server: published beside the releases under the same prefixes as a local
channel's (``label/nightly/<subdir>/``, ``whl/nightly/simple/``), and ``index --keep-nightlies N`` deleting the
older nights from the objects and the indexes while the releases' objects stay byte for byte. Read back as users
do: pip (``--pre``) and py-rattler's solver from the bucket's HTTP URL."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Scratch
from tests.integration.support_s3 import ACCESS_KEY, PUBLIC_READ, SECRET_KEY, consistent, pipeline, s3_env
from tests.integration.test_nightly_channel import (
    NIGHTS,
    TAGS,
    build_of,
    nightly_package,
    nightly_wheel,
    pip_download,
    solve,
)
from torchbuild.channels import pep503

pytestmark = pytest.mark.slow

PREFIX = "pt"
RELEASE_WHEEL = f"torch-2.13.0+cpu-{TAGS}.whl"
RELEASE_PACKAGE = "pytorch-2.13.0-py3.11_cpu_0.conda"


@dataclass(frozen=True)
class Published:
    client: Any
    bucket: str
    http: str  # the channel's HTTP URL, what installers read
    channel: str  # s3://bucket/prefix
    env: dict[str, str]
    workspace: Path
    outputs: list[str]  # each publish's stdout + stderr, the release's first
    release: dict[str, bytes]  # the release's objects after its publish

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return pipeline(*args, env=self.env, cwd=self.workspace)

    def objects(self) -> dict[str, bytes]:
        """Every object's bytes, by its key relative to the prefix."""
        found = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"{PREFIX}/"):
            for obj in page.get("Contents", []):
                body = self.client.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
                found[obj["Key"].removeprefix(f"{PREFIX}/")] = body
        return found

    def releases(self) -> dict[str, bytes]:
        return {k: v for k, v in self.objects().items() if not k.startswith(("label/", "whl/nightly/"))}

    def listed(self, key: str) -> list[str]:
        data = json.loads(self.objects()[key])
        return sorted([*data.get("packages", {}), *data.get("packages.conda", {})])

    def links(self, key: str) -> list[str]:
        return sorted(pep503.wheel_links(self.objects()[key].decode()))


@pytest.fixture(scope="module")
def published(moto_endpoint: str, module_scratch: Scratch) -> Published:
    import boto3

    root = module_scratch("s3-nightly")
    name = f"tb-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1",
                          aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)  # fmt: skip
    client.create_bucket(Bucket=name)
    policy = json.loads(json.dumps(PUBLIC_READ).replace("{}", name))
    client.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))  # installers read anonymously
    workspace = root / "ws"
    workspace.mkdir()
    env = s3_env(moto_endpoint, root)
    bench = Published(client, name, f"{moto_endpoint}/{name}/{PREFIX}", f"s3://{name}/{PREFIX}", env, workspace,
                      [], {})  # fmt: skip
    release = build_of(root / "release", "2.13.0", "2.13.0+cpu")
    result = bench.run("publish", *release.files, "--channel", bench.channel)
    assert result.returncode == 0, result.stdout + result.stderr
    bench.outputs.append(result.stdout + result.stderr)
    bench.release.update(bench.releases())
    for night in NIGHTS:
        build = build_of(root / night, f"2.13.0.dev{night}", f"2.13.0.dev{night}+cpu")
        result = bench.run("publish", *build.files, "--channel", bench.channel)
        assert result.returncode == 0, result.stdout + result.stderr
        bench.outputs.append(result.stdout + result.stderr)
    return bench


def test_nightlies_go_under_the_nightly_prefixes_and_the_releases_stay_as_they_were(published: Published) -> None:
    # Before: publish refused every nightly to S3 ("... are nightlies ..., not to S3; nothing was published").
    assert published.listed("linux-64/repodata.json") == [RELEASE_PACKAGE]
    assert published.listed("label/nightly/linux-64/repodata.json") == [nightly_package(n) for n in NIGHTS]
    assert published.listed("label/nightly/noarch/repodata.json") == []  # a conda channel of its own
    assert published.links("whl/simple/torch/") == [RELEASE_WHEEL]
    assert published.links("whl/nightly/simple/torch/") == [nightly_wheel(n) for n in NIGHTS]
    assert published.links("whl/nightly/simple/torch/index.html") == [nightly_wheel(n) for n in NIGHTS]
    assert pep503.project_links(published.objects()["whl/nightly/simple/"].decode()) == {"torch"}
    assert consistent(published.client, published.bucket, PREFIX) == []
    first_night = published.outputs[1]
    assert f"new       label/nightly/linux-64/{nightly_package(NIGHTS[0])}" in first_night
    assert f"new       whl/nightly/simple/torch/{nightly_wheel(NIGHTS[0])}" in first_night
    endpoint = published.env["AWS_ENDPOINT_URL_S3"]
    assert f"conda install -c {endpoint}/{published.bucket}/{PREFIX}/label/nightly pytorch" in first_night
    assert f"pip install --pre --index-url {endpoint}/{published.bucket}/{PREFIX}/whl/nightly/simple torch" in (
        first_night
    )
    assert published.releases() == published.release  # the nightlies changed no release object nor index


@pytest.fixture(scope="module")
def pruned(published: Published) -> subprocess.CompletedProcess[str]:
    return published.run("index", "--channel", published.channel, "--keep-nightlies", "2")


def test_keep_nightlies_deletes_the_oldest_night_from_objects_and_indexes(
    published: Published, pruned: subprocess.CompletedProcess[str]
) -> None:
    # Before: "index: --keep-nightlies is not supported for S3 channels yet".
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    oldest = NIGHTS[0]
    assert "kept the newest 2 nights, removed 2 older nightly files" in pruned.stdout
    assert f"removed label/nightly/linux-64/{nightly_package(oldest)}" in pruned.stdout
    assert f"removed whl/nightly/simple/torch/{nightly_wheel(oldest)}" in pruned.stdout
    objects = published.objects()
    assert f"label/nightly/linux-64/{nightly_package(oldest)}" not in objects
    assert f"whl/nightly/simple/torch/{nightly_wheel(oldest)}" not in objects
    assert published.listed("label/nightly/linux-64/repodata.json") == [nightly_package(n) for n in NIGHTS[1:]]
    assert published.links("whl/nightly/simple/torch/") == [nightly_wheel(n) for n in NIGHTS[1:]]
    assert published.links("whl/nightly/simple/torch/index.html") == [nightly_wheel(n) for n in NIGHTS[1:]]
    assert consistent(published.client, published.bucket, PREFIX) == []
    assert published.releases() == published.release  # releases: byte for byte, indexes included


def test_installers_get_the_newest_nightly_over_http_and_the_release_from_the_plain_index(
    published: Published, pruned: subprocess.CompletedProcess[str], tmp_path: Path
) -> None:
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    http = published.http
    got = pip_download(f"{http}/whl/nightly/simple", "torch", tmp_path / "nightly", pre=True)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "nightly").iterdir()] == [nightly_wheel(NIGHTS[-1])]
    got = pip_download(f"{http}/whl/simple", "torch", tmp_path / "release", pre=True)
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "release").iterdir()] == [RELEASE_WHEEL]
    gone = pip_download(f"{http}/whl/nightly/simple", f"torch==2.13.0.dev{NIGHTS[0]}", tmp_path / "gone", pre=True)
    assert gone.returncode != 0 and "No matching distribution" in gone.stdout + gone.stderr
    assert f"pytorch 2.13.0.dev{NIGHTS[-1]} {http}/label/nightly" in solve(f"{http}/label/nightly")
    assert f"pytorch 2.13.0 {http}" in solve(http)


def test_a_nightly_among_the_releases_is_refused_by_index_naming_where_it_belongs(
    published: Published, pruned: subprocess.CompletedProcess[str]
) -> None:
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    stray = f"{PREFIX}/whl/simple/torch/{nightly_wheel(NIGHTS[-1])}"
    body = published.objects()[f"whl/nightly/simple/torch/{nightly_wheel(NIGHTS[-1])}"]
    published.client.put_object(Bucket=published.bucket, Key=stray, Body=body)
    try:
        before = published.objects()
        result = published.run("index", "--channel", published.channel, "--keep-nightlies", "1")
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"s3://{published.bucket}/{stray}: a nightly (a .devN version), which belongs in " in result.stderr
        assert f"{published.channel}/whl/nightly/simple/torch/; nothing was indexed" in result.stderr
        assert "Traceback" not in result.stderr
        assert published.objects() == before
    finally:
        published.client.delete_object(Bucket=published.bucket, Key=stray)


def test_index_takes_the_matrix_keep_nightlies_where_the_flag_is_not_given(
    published: Published, pruned: subprocess.CompletedProcess[str]
) -> None:
    # Before: 'index' had no --matrix (argparse: unrecognized arguments, exit 2), and no matrix had keep_nightlies.
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    bad = published.workspace / "bad.yaml"
    bad.write_text("keep_nightlies: 0\n")
    before = published.objects()
    refused = published.run("index", "--channel", published.channel, "--matrix", bad)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{bad}:1: 'keep_nightlies' must be from 1 to 2147483647, not 0" in refused.stderr
    assert published.objects() == before
    matrix = published.workspace / "matrix.yaml"
    matrix.write_text("keep_nightlies: 1\n")
    kept = published.run("index", "--channel", published.channel, "--matrix", matrix)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "kept the newest 1 nights, removed 2 older nightly files" in kept.stdout
    assert published.listed("label/nightly/linux-64/repodata.json") == [nightly_package(NIGHTS[-1])]
    assert published.links("whl/nightly/simple/torch/") == [nightly_wheel(NIGHTS[-1])]
    assert published.releases() == published.release


def test_a_nightlys_compiled_companion_goes_under_the_nightly_prefixes_beside_its_torch(
    published: Published, tmp_path: Path
) -> None:
    """A companion compiled beside a nightly torch is a nightly of torch's night (issue 55): on S3 too it is published
    under label/nightly/ and whl/nightly/simple/, and the printed lines pin both (a prefix of its own here)."""
    from tests.integration.test_install_lines import COMPANION, build, nightly

    night = nightly(NIGHTS[-1])
    channel = f"s3://{published.bucket}/companions"
    result = published.run("publish", *build(tmp_path / "night", night), "--channel", channel)
    assert result.returncode == 0, result.stdout + result.stderr
    wheel = f"{COMPANION}-{night.companion}-{TAGS}.whl"
    assert f"new       whl/nightly/simple/{COMPANION}/{wheel}" in result.stdout
    assert f"new       label/nightly/linux-64/{COMPANION}-0.1.0.dev{NIGHTS[-1]}-py3.11_cpu_0.conda" in result.stdout
    http = f"{published.env['AWS_ENDPOINT_URL_S3']}/{published.bucket}/companions"
    assert f"conda install -c {http}/label/nightly pytorch {COMPANION}" in result.stdout
    assert f"--index-url {http}/whl/nightly/simple torch=={night.torch} {COMPANION}=={night.companion}" in result.stdout
    keys = published.client.list_objects_v2(Bucket=published.bucket, Prefix="companions/")["Contents"]
    assert not [k["Key"] for k in keys if COMPANION in k["Key"] and "nightly" not in k["Key"]]
