"""Files the pipeline reads back (a stage's report, a channel's repodata.json) may be valid JSON of another shape
(an edit, another torchbuild version, another tool): each gives one message naming the file, not a traceback. The
state file (test_smoke_job.py), report.json (test_channels.py) and the SBOM (test_sbom_cmd.py) are tested with
the commands that read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchbuild.channels import repodata
from torchbuild.errors import UserError
from torchbuild.run.state import State
from torchbuild.wheel.repair_report import RepairReport

TOO_DEEP = "is not valid JSON (nested deeper than 64 levels)"
GOOD_REPORT = {"wheel": "torch.whl", "platform": "win-64", "vendored": [], "vc_runtime_floor": None}


@pytest.mark.parametrize(
    "raw",
    [[], "text", {"platform": "win-64"}, {**GOOD_REPORT, "vendored": [{"path": "x.dll"}]},
     {**GOOD_REPORT, "vendored": 5}, {**GOOD_REPORT, "vc_runtime_floor": [1]}, {**GOOD_REPORT, "notes": 3}],
)  # fmt: skip
def test_a_repair_report_of_the_wrong_shape_is_named(raw: object, tmp_path: Path) -> None:
    path = tmp_path / "repair.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(UserError) as info:
        RepairReport.read(path)
    assert str(info.value).startswith(f"{path}: not a repair report of this torchbuild (")
    assert str(info.value).endswith("rerun with --force")


def test_a_good_repair_report_reads(tmp_path: Path) -> None:
    report = RepairReport(wheel="torch.whl", platform="win-64", notes=("a note",))
    report.write(tmp_path / "repair.json")
    assert RepairReport.read(tmp_path / "repair.json") == report


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[]", "is not a repodata object"),
        ('{"packages": []}', "'packages' is not an object"),
        ('{"packages.conda": "x"}', "'packages.conda' is not an object"),
        ('{"removed": {}}', "'removed' is not a list"),
        ('{"packages": ' + "[" * 5000 + "]" * 5000 + "}", TOO_DEEP),  # past Python's recursion limit
        ('{"info": ' + "[" * 65 + "]" * 65 + "}", TOO_DEEP),  # past torchbuild's limit (64)
    ],
)
def test_a_channel_index_of_the_wrong_shape_is_named_with_the_fix(raw: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        repodata.parse(raw, "linux-64", "s3://bucket/linux-64/repodata.json")
    assert str(info.value).startswith("s3://bucket/linux-64/repodata.json")
    assert message in str(info.value) and "run 'python pipeline.py index' to rebuild it" in str(info.value)


@pytest.mark.parametrize("raw", ["[]", '{"stages": []}', '{"stages": {"build": {"stage": 1}}}',
                                 '{"stages": {"build": {"stage": "build", "status": "great"}}}'])  # fmt: skip
def test_a_state_file_of_the_wrong_shape_only_reruns_every_stage(
    raw: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "state.json"
    path.write_text(raw)
    assert State.load(path).stages == {}
    assert f"{path} is unreadable; every stage runs again" in " ".join(capsys.readouterr().err.split())
