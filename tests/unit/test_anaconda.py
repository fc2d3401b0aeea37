"""anaconda.org publishing, through the CLI, against a stand-in for anaconda-client's ``anaconda`` executable.

The stand-in is a fake (anaconda.org cannot be reached from here): a script named ``anaconda`` first on PATH that
records its arguments, the token file's content and its environment, prints the token (as a verbose client
might), and exits with the code the test asks for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.builders import make_wheel
from tests.conftest import ROOT
from tests.integration.support_conda import assemble_small

TOKEN = "an-TOKEN-0123456789abcdef"
STAND_IN = """#!{python}
import json, os, sys
argv = sys.argv[1:]
token_file = argv[argv.index("--token") + 1]
record = {{"argv": argv, "token": open(token_file).read(), "token_file_mode": oct(os.stat(token_file).st_mode & 0o777),
          "env_has_token": "ANACONDA_API_TOKEN" in os.environ}}
with open(os.environ["STAND_IN_RECORD"], "w") as handle:
    json.dump(record, handle)
print("Using token", record["token"], "for", argv[argv.index("--user") + 1])
print("Uploading", os.path.basename(argv[-1]))
sys.exit(int(os.environ.get("STAND_IN_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def conda_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkgs")
    return assemble_small(out, {"lib/a.txt": b"a"}, name="pytorch", version="2.5.1", build="py3.11_cpu_0")


def publish(
    tmp_path: Path, *args: str | Path, exit_code: int = 0, token: str | None = TOKEN
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "anaconda"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "ANACONDA_API_TOKEN"}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", STAND_IN_RECORD=str(tmp_path / "record.json"),
               STAND_IN_EXIT=str(exit_code))  # fmt: skip
    if token is not None:
        env["ANACONDA_API_TOKEN"] = token
    result = subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "publish", *map(str, args)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    record = json.loads((tmp_path / "record.json").read_text()) if (tmp_path / "record.json").is_file() else None
    return result, record


def test_upload_command_and_token_handling(conda_file: Path, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", "torch-2.5.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    result, record = publish(tmp_path, conda_file, wheel, "--channel", "anaconda://my-org/nightly")
    assert result.returncode == 0, result.stderr
    assert record is not None
    token_file = record["argv"][1]
    assert record["argv"] == [
        "--token", token_file, "upload", "--user", "my-org", "--label", "nightly", "--skip-existing", str(conda_file)
    ]  # fmt: skip
    assert record["token"] == TOKEN and record["token_file_mode"] == "0o600"
    assert not record["env_has_token"]  # the client gets the token from the file only
    assert not Path(token_file).exists()  # and the file is gone afterwards
    output = result.stdout + result.stderr
    assert TOKEN not in output
    assert "Using token *** for my-org" in output
    assert f"$ {tmp_path / 'bin' / 'anaconda'} --token {token_file} upload --user my-org --label nightly" in output
    assert "not sent: " + wheel.name in output  # wheels do not go to anaconda.org
    assert "conda install -c https://conda.anaconda.org/my-org/label/nightly pytorch" in result.stdout + result.stderr


def test_replace_forces_and_main_label(conda_file: Path, tmp_path: Path) -> None:
    result, record = publish(tmp_path, conda_file, "--channel", "anaconda://my-org", "--replace")
    assert result.returncode == 0, result.stderr
    assert record is not None and record["argv"][2:] == [
        "upload", "--user", "my-org", "--label", "main", "--force", str(conda_file)
    ]  # fmt: skip
    assert "conda install -c https://conda.anaconda.org/my-org pytorch" in result.stdout + result.stderr


def test_failures_are_clear_and_redacted(conda_file: Path, tmp_path: Path) -> None:
    failed, _ = publish(tmp_path / "a", conda_file, "--channel", "anaconda://my-org", exit_code=1)
    assert failed.returncode == 2
    assert "anaconda upload to my-org/main failed (exit 1)" in failed.stderr
    assert TOKEN not in failed.stdout + failed.stderr and "Traceback" not in failed.stderr
    no_token, record = publish(tmp_path / "b", conda_file, "--channel", "anaconda://my-org", token=None)
    assert no_token.returncode == 2 and "ANACONDA_API_TOKEN" in no_token.stderr and record is None
    for bad in ("anaconda://", "anaconda://a/b/c", "anaconda://bad owner"):
        result, record = publish(tmp_path / "c", conda_file, "--channel", bad)
        assert result.returncode == 2 and "anaconda://owner/label" in result.stderr and record is None


@pytest.fixture(autouse=True)
def _dirs(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()


def test_a_nightly_goes_up_under_the_nightly_label_whatever_label_the_channel_names(tmp_path: Path) -> None:
    # Before: it went up under the channel's label (main), beside the releases.
    nightly = assemble_small(tmp_path / "pkgs", {"lib/a.txt": b"a"}, name="pytorch", version="2.10.0.dev20251105",
                             build="py3.11_cpu_0")  # fmt: skip
    result, record = publish(tmp_path, nightly, "--channel", "anaconda://my-org")
    assert result.returncode == 0, result.stderr
    assert record is not None
    assert record["argv"][2:] == ["upload", "--user", "my-org", "--label", "nightly", "--skip-existing", str(nightly)]
    assert "conda install -c https://conda.anaconda.org/my-org/label/nightly pytorch" in result.stdout + result.stderr


def test_a_nightlys_compiled_companion_goes_up_under_the_nightly_label_beside_its_torch(tmp_path: Path) -> None:
    """A companion compiled beside a nightly torch carries torch's night (issue 55): one install line for both."""
    torch = assemble_small(tmp_path / "pkgs", {"lib/a.txt": b"a"}, name="pytorch", version="2.10.0.dev20251105",
                           build="py3.11_cpu_0", depends=())  # fmt: skip
    companion = assemble_small(tmp_path / "pkgs", {"lib/b.txt": b"b"}, name="visionfixture",
                               version="0.1.0.dev20251105", build="py3.11_cpu_0",
                               depends=("pytorch ==2.10.0.dev20251105 py3.11_cpu_0",))  # fmt: skip
    result, record = publish(tmp_path, torch, companion, "--channel", "anaconda://my-org")
    assert result.returncode == 0, result.stderr
    assert record is not None and record["argv"][2:7] == ["upload", "--user", "my-org", "--label", "nightly"]
    said = result.stdout + result.stderr
    assert "conda install -c https://conda.anaconda.org/my-org/label/nightly pytorch visionfixture" in said


def test_a_nightly_to_a_labelled_channel_is_installed_from_the_nightly_label_not_below_the_channels(
    tmp_path: Path,
) -> None:
    # Before: "conda install -c https://conda.anaconda.org/my-org/label/testing/label/nightly pytorch", a channel
    # that does not exist.
    nightly = assemble_small(tmp_path / "pkgs", {"lib/a.txt": b"a"}, name="pytorch", version="2.10.0.dev20251105",
                             build="py3.11_cpu_0")  # fmt: skip
    result, record = publish(tmp_path, nightly, "--channel", "anaconda://my-org/testing")
    assert result.returncode == 0, result.stderr
    assert record is not None and "--label" in record["argv"] and "nightly" in record["argv"]
    output = result.stdout + result.stderr
    assert "conda install -c https://conda.anaconda.org/my-org/label/nightly pytorch" in output
    assert "label/testing/label/nightly" not in output
    assert "pip install" not in output  # anaconda.org serves no pip index
