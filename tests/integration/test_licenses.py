"""The wheel's PEP 639 license tree in the conda package: moved to info/licenses/ with its relative paths, the
installed .dist-info consistent with what is left (RECORD, METADATA's License-File), and pip and importlib.metadata
working on it in a real prefix (a venv whose site-packages the package is linked into by py-rattler)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import make_wheel, record_hash, torch_plan, with_sbom
from tests.integration.test_conda_verify import Built, build, context, statuses
from torchbuild.conda import info_files, licenses, rattler_child
from torchbuild.errors import UserError
from torchbuild.plan import Plan
from torchbuild.results import Artifact
from torchbuild.stages.verify import stage as verify

SITE = "lib/python3.11/site-packages"
DIST = "torch-2.13.0+cpu.dist-info"
DEEP = "third_party/kineto/libkineto/third_party/dynolog/third_party/prometheus-cpp/3rdparty/civetweb/LICENSE.txt"
TREE = {
    "LICENSE": b"BSD-3-Clause, the project's own\n",
    "NOTICE": b"notices\n",
    "third_party/FP16/LICENSE": b"MIT, FP16\n",
    "third_party/FXdiv/LICENSE": b"MIT, FXdiv\n",
    DEEP: b"MIT, civetweb\n",
}


def licensed_wheel(directory: Path, plan: Plan) -> Path:
    files = {
        "torch/__init__.py": f"__version__ = '{plan.version}'\n".encode(),
        **{f"{DIST}/licenses/{name}": data for name, data in TREE.items()},
    }
    fields = ["License-Expression: BSD-3-Clause AND MIT", *(f"License-File: {name}" for name in TREE)]
    return with_sbom(make_wheel(directory, plan.root.wheel, files, metadata_lines=fields))


@pytest.fixture
def built(tmp_path: Path) -> Built:
    plan = torch_plan()
    return build(tmp_path / "work", plan, licensed_wheel(tmp_path, plan))


def test_the_tree_is_in_info_licenses_and_out_of_the_dist_info(built: Built) -> None:
    info = built.package.info
    assert {f"info/licenses/{name}": info.get(f"info/licenses/{name}") for name in TREE} == {
        f"info/licenses/{name}": data for name, data in TREE.items()
    }
    payload = {m.name for m in built.package.files()}
    assert not [name for name in payload if "/licenses/" in name]
    assert "5 license files moved from torch-2.13.0+cpu.dist-info/licenses/ to info/licenses/" in built.conda.message
    assert "(5 License-File fields out of METADATA)" in built.conda.message
    paths = json.loads(info["info/paths.json"])["paths"]
    assert not [p for p in paths if p["_path"].startswith("info/")], "info/ files are not payload"


def test_the_package_verifies_and_is_byte_identical_when_made_again(built: Built, tmp_path: Path) -> None:
    inputs = {"repaired_wheel": built.wheel, "conda_package": built.conda.outputs["conda_package"]}
    result = verify.run(context(built.root, built.plan, inputs))
    assert [c for c in result.checks if c.status == "failed"] == []
    assert statuses(result.checks)["C1117"] == "passed"
    again = build(tmp_path / "again", built.plan, built.wheel.path)
    assert again.conda.outputs["conda_package"].sha256 == built.conda.outputs["conda_package"].sha256


def test_tar_bz2_gets_the_same_tree(tmp_path: Path) -> None:
    plan = torch_plan()
    bz2 = build(tmp_path / "work", plan, licensed_wheel(tmp_path, plan), conda_format="tar.bz2")
    assert bz2.package.path.name.endswith(".tar.bz2")
    assert bz2.package.info[f"info/licenses/{DEEP}"] == TREE[DEEP]
    result = verify.run(context(bz2.root, plan, {"conda_package": bz2.conda.outputs["conda_package"]},
                                conda_format="tar.bz2"))  # fmt: skip
    assert [c for c in result.checks if c.status == "failed"] == []


def test_record_and_metadata_say_what_is_installed(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    dist = site / DIST
    metadata = (
        "Metadata-Version: 2.4\nName: torch\nVersion: 2.13.0+cpu\nLicense-File: LICENSE\n"
        f"License-File: {DEEP}\nLicense-File: not/shipped/LICENSE\nRequires-Dist: filelock\n\nLicense-File: body\n"
    )
    rows = [[f"{DIST}/METADATA", record_hash(metadata.encode()), str(len(metadata))], [f"{DIST}/RECORD", "", ""]]
    for name in ("LICENSE", DEEP):
        path = dist / "licenses" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
        rows.append([f"{DIST}/licenses/{name}", record_hash(name.encode()), str(len(name))])
    (dist / "METADATA").write_text(metadata)
    (dist / "NOTICE").write_text("top-level notice")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    (dist / "RECORD").write_text(buffer.getvalue())

    taken = licenses.take(site, DIST, tmp_path / "out")

    assert taken.files == ("LICENSE", "NOTICE", DEEP) and (taken.moved, taken.dropped_fields) == (2, 2)
    assert (tmp_path / "out" / DEEP).read_text() == DEEP
    assert not (dist / "licenses").exists() and (dist / "NOTICE").is_file()
    new_metadata = (dist / "METADATA").read_text()
    assert new_metadata == (
        "Metadata-Version: 2.4\nName: torch\nVersion: 2.13.0+cpu\nLicense-File: not/shipped/LICENSE\n"
        "Requires-Dist: filelock\n\nLicense-File: body\n"
    ), "only the moved files' fields go, and nothing in the description"
    record = list(csv.reader(io.StringIO((dist / "RECORD").read_text())))
    assert record == [[f"{DIST}/METADATA", record_hash(new_metadata.encode()), str(len(new_metadata))],
                      [f"{DIST}/RECORD", "", ""]]  # fmt: skip


def test_a_clash_in_info_and_a_file_that_is_no_package_are_refused(built: Built, tmp_path: Path) -> None:
    package = built.conda.outputs["conda_package"].path
    before = package.read_bytes()
    with pytest.raises(UserError, match=r"already has info/index.json"):
        info_files.add(package, {"index.json": tmp_path / "x"}, level=3)
    assert package.read_bytes() == before, "the package is left as it was"
    not_package = tmp_path / "x.conda"
    not_package.write_bytes(b"not a zip")
    with pytest.raises(UserError, match=r"adding 1 files to info/ of .*x.conda failed"):
        info_files.add(not_package, {"licenses/LICENSE": tmp_path / "x"}, level=3)


def test_pip_and_importlib_metadata_work_in_a_real_prefix(built: Built, tmp_path: Path) -> None:
    """The package linked by py-rattler into a venv (its python and pip the prefix's): pip show lists the files,
    importlib.metadata finds each, and pip uninstall removes torch completely."""
    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, timeout=300)
    rattler_child.call("install_archive", timeout=300, archive=str(built.package.path), prefix=str(prefix),
                       cache_dir=str(tmp_path / "pkgs"))  # fmt: skip
    python = str(prefix / "bin" / "python")
    shown = subprocess.run([python, "-m", "pip", "show", "-f", "torch"], capture_output=True, text=True, check=True)
    assert "Version: 2.13.0+cpu" in shown.stdout and "torch/__init__.py" in shown.stdout
    assert "licenses" not in shown.stdout
    probe = (
        "import importlib.metadata as m, json; d = m.distribution('torch');"
        "print(json.dumps([d.version, d.read_text('INSTALLER'), d.metadata.get_all('License-File'),"
        " [str(f) for f in d.files if not f.locate().exists()], len(d.files)]))"
    )
    version, installer, fields, absent, count = json.loads(
        subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    assert (version, installer, fields, absent) == ("2.13.0+cpu", "conda\n", None, [])
    assert count >= 6
    site = prefix / SITE
    removed = subprocess.run([python, "-m", "pip", "uninstall", "-y", "torch"], capture_output=True, text=True)
    assert removed.returncode == 0, removed.stderr
    assert not (site / "torch").exists() and not (site / DIST).exists()


@pytest.mark.slow
def test_the_real_wheels_tree_fits_the_package_cache(tmp_path: Path) -> None:
    """torch 2.13.0's linux wheel: 98 license files, all in info/licenses/, none left in the dist-info."""
    from tests.builders import real_torch_wheel

    plan = torch_plan()
    real = build(tmp_path / "work", plan, real_torch_wheel(), compression_level=1)
    names = [n for n in real.package.info if n.startswith("info/licenses/")]
    assert len(names) == 98
    assert not [m.name for m in real.package.files() if "/licenses/" in m.name]
    assert Artifact.of(real.package.path).size > 0
