"""`python pipeline.py sbom ARTIFACT`: the table of a wheel's SBOM, and clear errors for what has none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.builders import make_wheel, with_sbom
from tests.conftest import ROOT

WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def sbom(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "pipeline.py"), "sbom", str(path)], capture_output=True,
                          text=True, check=False)  # fmt: skip


def test_the_table_names_the_torch_component_and_its_source(tmp_path: Path) -> None:
    result = sbom(with_sbom(make_wheel(tmp_path, WHEEL)))
    assert result.returncode == 0, result.stderr
    assert "torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json" in result.stdout
    assert "│ torch " in result.stdout and "2.13.0+cpu" in result.stdout
    assert "0 vendored files; CycloneDX 1.6, dated 2023-11-14T22:13:20+00:00" in result.stdout


def test_what_has_no_sbom_or_is_no_artifact_is_refused_by_name(tmp_path: Path) -> None:
    plain = sbom(make_wheel(tmp_path, WHEEL))
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert f"{tmp_path / WHEEL} carries no torchbuild.cdx.json: it was not repaired by torchbuild." in plain.stderr
    (tmp_path / "notes.txt").write_text("x\n")
    other = sbom(tmp_path / "notes.txt")
    assert other.returncode == 2
    assert "is not a wheel or conda package; valid: .whl, .conda, .tar.bz2 files." in other.stderr
    missing = sbom(tmp_path / "gone.conda")
    assert missing.returncode == 2 and f"{tmp_path / 'gone.conda'}: no such file." in missing.stderr


def test_piped_output_keeps_each_row_on_one_line_however_long(tmp_path: Path) -> None:
    deep = tmp_path / ("a-long-folder-name-" * 12)  # the torch row's source (the input wheel's path) is 300+ wide
    deep.mkdir()
    result = sbom(with_sbom(make_wheel(deep, WHEEL)))
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert str(deep / WHEEL) in row


def test_an_sbom_of_the_wrong_shape_is_named_not_a_traceback(tmp_path: Path) -> None:
    member = "torch-2.13.0+cpu.dist-info/sboms/torchbuild.cdx.json"
    for number, data in enumerate([b"[]", b'"text"', b'{"components": 3}', b'{"metadata": [1]}',
                                   b'{"components": [{"components": [{"hashes": 5}]}]}', b"\xff\xfe{}"]):  # fmt: skip
        wheel = make_wheel(tmp_path / str(number), WHEEL, extra_members={member: data})
        result = sbom(wheel)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (data, result.stderr)
        message = " ".join(result.stderr.split())
        assert f"{wheel}: {member}" in message, (data, message)
        assert "expected shape" in message or "not UTF-8" in message, (data, message)
