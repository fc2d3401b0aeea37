"""The C++ consumer compiled once per content of torch's headers and cmake files, linked and run in every
environment (consumer_cache.py): a second environment of the same content reuses the first's object, and one whose
headers differ (a broken package) compiles afresh and fails.

The environments are this host's real torch (the test interpreter's), each seen through a folder of its own whose
entries link to it; the broken one has ATen.h replaced.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from torchbuild.stages.smoke.resources import checks_consumer, consumer_cache, smoke_base

pytestmark = [
    pytest.mark.slow,  # compiles ATen's headers once (a minute on a busy machine)
    pytest.mark.skipif(
        sys.platform == "win32" or smoke_base.cxx_compiler() is None or checks_consumer.shutil.which("cmake") is None
        or importlib.util.find_spec("torch") is None,
        reason="skipped: needs a C++ compiler, cmake and torch installed in the test interpreter",
    ),
]  # fmt: skip


def _env_of(real: Path, root: Path, replaced: dict[str, str] | None = None) -> Path:
    """A torch folder under ``root`` whose entries link to the real one's, but for the files ``replaced``
    (relative path -> new text), whose folders are made real down to them."""
    torch = root / "torch"
    torch.mkdir(parents=True)
    for entry in real.iterdir():
        (torch / entry.name).symlink_to(entry)
    for relative, text in (replaced or {}).items():
        parts = Path(relative).parts
        here, source = torch, real
        for part in parts[:-1]:
            (here / part).unlink()
            (here / part).mkdir()
            source = source / part
            for entry in source.iterdir():
                (here / part / entry.name).symlink_to(entry)
            here = here / part
        (here / parts[-1]).unlink()
        (here / parts[-1]).write_text(text, encoding="utf-8")
    return torch


def test_a_second_environment_links_the_first_ones_object_and_a_broken_header_still_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    real = Path(spec.origin).parent
    shared = tmp_path / "shared"
    monkeypatch.setenv(consumer_cache.SHARED_ENV, str(shared))
    expect = smoke_base.Expect("any", "cpu", None, None)

    first = _env_of(real, tmp_path / "first")
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: first)
    outcome = checks_consumer.check_cpp_consumer(expect)
    assert outcome.status == "passed", outcome.message
    assert " built and run: ATen matmul and conv2d give the known answers" in outcome.message
    (kept,) = [p for p in shared.iterdir()]
    assert sorted(p.name for p in kept.iterdir()) == ["consumer.o", "link.json"]

    second = _env_of(real, tmp_path / "second")
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: second)
    outcome = checks_consumer.check_cpp_consumer(expect)
    assert outcome.status == "passed", outcome.message
    assert f"compiled once for this content ({shared / kept.name[:12]}...), linked and run here" in outcome.message
    assert str(second / "share" / "cmake") in outcome.message

    # an environment in a folder with a space and a letter outside ASCII (a Windows profile's, a user's work folder)
    spaced = _env_of(real, tmp_path / "Zoë Ng" / "third")
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: spaced)
    outcome = checks_consumer.check_cpp_consumer(expect)
    assert outcome.status == "passed", outcome.message
    assert f"compiled once for this content ({shared / kept.name[:12]}...), linked and run here" in outcome.message

    # same headers, but a library that does not load: the link and run stay this environment's own
    no_lib = _env_of(real, tmp_path / "no-lib", {"lib/libc10.so": "not a library"})
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: no_lib)
    with pytest.raises(smoke_base.CheckFailed, match=r"^linking the consumer \(compiled for this content before\)"):
        checks_consumer.check_cpp_consumer(expect)

    broken = _env_of(real, tmp_path / "broken", {"include/ATen/ATen.h": "#error this ATen.h is broken\n"})
    monkeypatch.setattr(checks_consumer, "torch_folder", lambda: broken)
    with pytest.raises(smoke_base.CheckFailed, match=r"^cmake --build exited 1: .*"):
        checks_consumer.check_cpp_consumer(expect)
    assert [p.name for p in shared.iterdir()] == [kept.name]  # nothing kept of a failed build
