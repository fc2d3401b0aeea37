"""The pin step's remembered index answer: reused only while nothing it depends on has changed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from packaging.version import Version

from torchbuild.pin import index_memo

TARGET = ("--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64")


class Indexes:
    """Answers like the pin step's question to pip does, counting how often it was asked."""

    def __init__(self, versions: list[str], paths: list[str]) -> None:
        self.versions = versions
        self.paths = paths
        self.asked = 0

    def __call__(self) -> tuple[list[Version], list[str]]:
        self.asked += 1
        return [Version(v) for v in self.versions], self.paths


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = wheels\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    return tmp_path / "cache" / "index-answers.json", config, wheels


def test_a_second_ask_with_nothing_changed_is_answered_from_the_record(setup: tuple[Path, Path, Path]) -> None:
    record, config, wheels = setup
    indexes = Indexes(["2.13.0+cpu", "2.12.0"], [str(config), str(wheels)])
    first = index_memo.offered(record, TARGET, indexes)
    again = index_memo.offered(record, TARGET, indexes)
    assert first == again == [Version("2.13.0+cpu"), Version("2.12.0")]
    assert indexes.asked == 1
    other_target = (*TARGET[:2], "3.12", *TARGET[3:])
    index_memo.offered(record, other_target, indexes)
    assert indexes.asked == 2  # another Python: its own question


def test_a_wheel_added_to_a_local_directory_asks_the_indexes_again(setup: tuple[Path, Path, Path]) -> None:
    record, config, wheels = setup
    indexes = Indexes(["2.12.0"], [str(config), str(wheels)])
    index_memo.offered(record, TARGET, indexes)
    time.sleep(0.05)  # file times move in clock ticks (a few ms): the addition must come after the record's tick
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    indexes.versions = ["2.13.0+cpu", "2.12.0"]
    assert index_memo.offered(record, TARGET, indexes)[0] == Version("2.13.0+cpu")
    assert indexes.asked == 2


@pytest.mark.parametrize("change", ["config edited", "config created", "PIP_ variable", "older than pip's cache"])
def test_what_the_answer_depends_on_changing_asks_again(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    record, config, wheels = setup
    missing = config.with_name("user-pip.conf")  # a file pip looks for that is not there (yet)
    indexes = Indexes(["2.12.0"], [str(config), str(missing), str(wheels)])
    index_memo.offered(record, TARGET, indexes)
    if change == "config edited":
        config.write_text("[global]\nfind-links = elsewhere\n")
    elif change == "config created":
        missing.write_text("[global]\nconstraint = c.txt\n")
    elif change == "PIP_ variable":
        monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple")
    else:
        raw = json.loads(record.read_text())
        for entry in raw.values():
            entry["at"] -= index_memo.MAX_AGE_S + 1
        record.write_text(json.dumps(raw))
    index_memo.offered(record, TARGET, indexes)
    assert indexes.asked == 2


def test_fresh_asks_even_where_the_record_holds_and_records_the_answer(setup: tuple[Path, Path, Path]) -> None:
    record, config, _ = setup
    indexes = Indexes(["2.12.0"], [str(config)])
    index_memo.offered(record, TARGET, indexes)
    indexes.versions = ["2.13.0+cpu", "2.12.0"]
    assert index_memo.offered(record, TARGET, indexes, fresh=True)[0] == Version("2.13.0+cpu")  # --force
    assert index_memo.offered(record, TARGET, indexes)[0] == Version("2.13.0+cpu")  # the rerun after it
    assert indexes.asked == 2


def test_no_record_always_asks_and_a_corrupt_record_is_asked_over(setup: tuple[Path, Path, Path]) -> None:
    record, config, _ = setup
    indexes = Indexes(["2.12.0"], [str(config)])
    index_memo.offered(None, TARGET, indexes)
    index_memo.offered(None, TARGET, indexes)
    assert indexes.asked == 2
    record.parent.mkdir(parents=True)
    record.write_text("{not json")
    assert index_memo.offered(record, TARGET, indexes) == [Version("2.12.0")]
    assert json.loads(record.read_text())  # rewritten whole
    assert indexes.asked == 3


def test_local_directories_are_the_file_urls_and_paths_with_the_project_folder() -> None:
    found = index_memo.local_directories(
        ["https://pypi.org/simple", "file:///opt/pypi/simple", "/opt/wheels", "file:///with%20space"], "torch"
    )
    assert found == [
        "/opt/pypi/simple", "/opt/pypi/simple/torch", "/opt/wheels", "/opt/wheels/torch", "/with space",
        "/with space/torch",
    ]  # fmt: skip


def _remember_many(record: str, writer: int, count: int) -> None:
    for n in range(count):
        index_memo.remember(Path(record), [f"writer-{writer}", str(n)], [Version("2.13.0")], [])


def test_runs_recording_at_once_keep_every_answer(tmp_path: Path) -> None:
    """Several runs on one machine share the record (the user's cache): each one's answer survives the others'
    writes, so that none of their reruns asks the indexes again."""
    import multiprocessing

    record = tmp_path / "index-answers.json"
    writers = [multiprocessing.get_context("spawn").Process(target=_remember_many, args=(str(record), w, 30))
               for w in range(4)]  # fmt: skip
    for process in writers:
        process.start()
    for process in writers:
        process.join(120)
    assert [p.exitcode for p in writers] == [0, 0, 0, 0]
    assert all(index_memo.recall(record, [f"writer-{w}", str(n)]) for w in range(4) for n in range(30))


def test_runs_in_two_environments_keep_an_answer_each(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one cell with other pip settings (a CI job and a person's shell, tests beside a build) share the
    record: each keeps its own answer, instead of each asking again after the other has run."""
    record, config, wheels = setup
    indexes = Indexes(["2.13.0+cpu"], [str(config), str(wheels)])
    index_memo.offered(record, TARGET, indexes)
    monkeypatch.setenv("PIP_INDEX_URL", "file:///elsewhere/simple")
    index_memo.offered(record, TARGET, indexes)
    assert indexes.asked == 2  # the other settings: their own question
    monkeypatch.delenv("PIP_INDEX_URL")
    index_memo.offered(record, TARGET, indexes)
    assert indexes.asked == 2  # the first settings' answer is still there


def test_recording_drops_the_answers_too_old_to_be_used(setup: tuple[Path, Path, Path]) -> None:
    record, config, wheels = setup
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"old": {"at": time.time() - index_memo.MAX_AGE_S - 1, "versions": []}}))
    index_memo.offered(record, TARGET, Indexes(["2.13.0+cpu"], [str(config), str(wheels)]))
    assert "old" not in json.loads(record.read_text()) and len(json.loads(record.read_text())) == 1
