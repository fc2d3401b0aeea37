"""torchbuild/data's YAML parsed once per text (datafiles.parse): kept as JSON under the cache by the text's sha256,
read back on the next run, parsed again when the text changes, and not kept where JSON would change it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from torchbuild.config import datafiles
from torchbuild.errors import UserError


def _kept(tmp_path: Path, text: str) -> Path:
    return tmp_path / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def test_a_parse_is_kept_by_its_text_and_an_edited_text_is_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(datafiles, "PARSED", tmp_path)
    text = "rows:\n  - name: mkl\n    version: 2025.0.1\n    floor: 1.5\n"
    assert datafiles.parse(text, "t.yaml") == {"rows": [{"name": "mkl", "version": "2025.0.1", "floor": 1.5}]}
    kept = _kept(tmp_path, text)
    assert kept.is_file()
    # the next run reads the kept JSON (shown by a kept copy that says something else)
    kept.write_text('{"rows": []}', encoding="utf-8")
    assert datafiles.parse(text, "t.yaml") == {"rows": []}

    edited = text.replace("2025.0.1", "2025.0.2")
    assert datafiles.parse(edited, "t.yaml")["rows"][0]["version"] == "2025.0.2"


def test_what_json_would_change_is_not_kept_and_bad_yaml_still_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(datafiles, "PARSED", tmp_path)
    text = "11.8: cuda\n"  # a float key: JSON would give back the string "11.8"
    assert datafiles.parse(text, "t.yaml") == {11.8: "cuda"}
    assert not _kept(tmp_path, text).exists()
    with pytest.raises(UserError, match=r"^torchbuild/data/t.yaml is not valid YAML: "):
        datafiles.parse("rows: [\n", "t.yaml")


def test_an_unwritable_cache_only_costs_the_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setattr(datafiles, "PARSED", blocked / "parsed")
    assert datafiles.parse("a: 1\n", "t.yaml") == {"a": 1}
