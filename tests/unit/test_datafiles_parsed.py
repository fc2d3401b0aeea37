"""torchbuild/data's YAML parsed once per text (datafiles.parse): kept as JSON under the cache by the text's sha256,
read back on the next run, parsed again when the text changes or the kept entry is damaged, and not kept where JSON
would change it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from torchbuild.errors import UserError
from torchbuild.knowledge import datafiles

WHERE = "torchbuild/data/t.yaml"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(datafiles, "user_cache_dir", lambda: tmp_path)
    return tmp_path / "data-parsed"


def _kept(cache: Path, text: str) -> Path:
    return cache / f"{hashlib.sha256(text.encode()).hexdigest()}.json"


def _entry(body: str) -> str:
    return f"{hashlib.sha256(body.encode()).hexdigest()}\n{body}"


def test_a_parse_is_kept_by_its_text_and_an_edited_text_is_parsed_again(cache: Path) -> None:
    text = "rows:\n  - name: mkl\n    version: 2025.0.1\n    floor: 1.5\n"
    assert datafiles.parse(text, WHERE) == {"rows": [{"name": "mkl", "version": "2025.0.1", "floor": 1.5}]}
    kept = _kept(cache, text)
    assert kept.is_file()
    # the next run reads the kept JSON (shown by a kept copy that says something else)
    kept.write_text(_entry('{"rows": []}'), encoding="utf-8")
    assert datafiles.parse(text, WHERE) == {"rows": []}

    edited = text.replace("2025.0.1", "2025.0.2")
    assert datafiles.parse(edited, WHERE)["rows"][0]["version"] == "2025.0.2"


@pytest.mark.parametrize("damage", ['{"rows": []}', _entry('{"rows": [')[:-3], "", "\x00\x00"])
def test_a_damaged_entry_is_parsed_again_and_replaced(cache: Path, damage: str) -> None:
    text = "rows:\n  - name: mkl\n"
    datafiles.parse(text, WHERE)
    _kept(cache, text).write_text(damage, encoding="utf-8")  # valid JSON without its digest, a cut write, empty
    assert datafiles.parse(text, WHERE) == {"rows": [{"name": "mkl"}]}
    assert _kept(cache, text).read_text(encoding="utf-8") == _entry('{"rows": [{"name": "mkl"}]}')


def test_what_json_would_change_is_not_kept_and_bad_yaml_still_says_so(cache: Path) -> None:
    text = "11.8: cuda\n"  # a float key: JSON would give back the string "11.8"
    assert datafiles.parse(text, WHERE) == {11.8: "cuda"}
    assert not _kept(cache, text).exists()
    with pytest.raises(UserError, match=r"^torchbuild/data/t.yaml is not valid YAML: "):
        datafiles.parse("rows: [\n", WHERE)


def test_an_unwritable_cache_only_costs_the_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setattr(datafiles, "user_cache_dir", lambda: blocked)
    assert datafiles.parse("a: 1\n", WHERE) == {"a": 1}
