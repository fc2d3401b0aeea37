"""torchaudio's smoke checks across its eras: where the C++ extension's flag lives, and which resampler exists.

The real proof is the corpus under Wine (torch 1.8.1 with torchaudio 0.8.1, whose Windows wheel has neither
torchaudio._extension nor functional.resample); no torchaudio of that era runs on this host's Python and torch, so
these tests give the checks FAKE module lookups and FAKE torchaudio namespaces shaped like each release's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from torchbuild.stages.smoke.resources import checks_audio


def fake_import(modules: dict[str, Any]) -> Any:
    """A FAKE importlib.import_module over ``modules``."""

    def import_module(name: str) -> Any:
        if name not in modules:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return modules[name]

    return import_module


def test_a_new_release_says_its_extension_loaded_or_not() -> None:
    loaded = fake_import({"torchaudio._extension": SimpleNamespace(_IS_TORCHAUDIO_EXT_AVAILABLE=True)})
    assert checks_audio.extension_state(loaded) == (True, "its C++ extension loaded")
    missing = fake_import({"torchaudio._extension": SimpleNamespace(_IS_TORCHAUDIO_EXT_AVAILABLE=False)})
    assert checks_audio.extension_state(missing)[0] is False


def test_torchaudio_0_8s_windows_wheel_has_no_extension_and_says_so() -> None:
    """0.8.1 win_amd64: torchaudio/extension/ without a flag, and no torchaudio/_torchaudio.pyd."""
    state = checks_audio.extension_state(fake_import({"torchaudio.extension": SimpleNamespace()}))
    assert state == (None, "no extension flag to read; this build ships no torchaudio._torchaudio, so no C++ extension")
    with_pyd = fake_import({"torchaudio.extension": SimpleNamespace(), "torchaudio._torchaudio": SimpleNamespace()})
    said = "no extension flag to read; torchaudio._torchaudio imported"
    assert checks_audio.extension_state(with_pyd) == (None, said)


def test_a_module_that_fails_on_a_missing_dependency_is_not_taken_for_an_old_release() -> None:
    def import_module(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'torch._six'", name="torch._six")

    with pytest.raises(ModuleNotFoundError, match=r"torch\._six"):
        checks_audio.extension_state(import_module)


def test_the_resampler_is_functional_resample_where_it_exists_else_the_transform() -> None:
    def resample(wave: Any, rate: int, target: int) -> str:
        return f"functional {rate}->{target}"

    new = SimpleNamespace(functional=SimpleNamespace(resample=resample))
    assert checks_audio.resampler(new)("x", 16000, 8000) == "functional 16000->8000"

    class Resample:  # torchaudio.transforms.Resample's call shape, FAKE
        def __init__(self, rate: int, target: int) -> None:
            self.rates = (rate, target)

        def __call__(self, wave: Any) -> str:
            return f"transform {self.rates[0]}->{self.rates[1]} of {wave}"

    old = SimpleNamespace(functional=SimpleNamespace(), transforms=SimpleNamespace(Resample=Resample))
    assert checks_audio.resampler(old)("x", 16000, 8000) == "transform 16000->8000 of x"
