"""Smoke checks of torchaudio beside torch, run where the Plan builds torchaudio (``--expect-torchaudio``): it imports
with the Plan's release from the environment and its C++ extension (libtorchaudio) loaded; a spectrogram of a 1 kHz
sine peaks at 1 kHz; a resample from 16 kHz to 8 kHz keeps the length, the energy and the tone. Standard library only
at module level (copied into the fresh environments with smoke_checks.py).
"""

from __future__ import annotations

import importlib
import math
import os
import time
from collections.abc import Callable
from typing import Any

from .smoke_base import CheckFailed, Expect, Outcome, torch_module

RATE = 16_000  # Hz: one second of a sine at this rate
TONE = 1_000.0  # Hz
AMPLITUDE = 0.5
N_FFT = 512  # bins of RATE / N_FFT = 31.25 Hz: 1 kHz falls on bin 32 exactly
ENERGY_TOLERANCE = 0.05  # relative: a 1 kHz tone is far below 8 kHz's Nyquist frequency, the filter keeps it


def _torchaudio() -> Any:
    return importlib.import_module("torchaudio")


def _sine(rate: int) -> Any:
    torch = torch_module()
    t = torch.arange(rate, dtype=torch.float32) / rate
    return (AMPLITUDE * torch.sin(2 * math.pi * TONE * t)).unsqueeze(0)


def _peak_hz(wave: Any, rate: int, n_fft: int) -> tuple[float, float]:
    """Where the power spectrogram of ``wave`` peaks (mean over frames), and the bin width."""
    torchaudio = _torchaudio()
    power = torchaudio.transforms.Spectrogram(n_fft=n_fft, power=2.0)(wave)  # (1, n_fft // 2 + 1, frames)
    peak = int(power.mean(dim=-1).squeeze(0).argmax())
    width = rate / n_fft
    return peak * width, width


def check_torchaudio_import(expect: Expect) -> Outcome:
    started = time.perf_counter()
    torchaudio = _torchaudio()
    took = time.perf_counter() - started
    problems = []
    version = str(torchaudio.__version__)
    if expect.torchaudio and version.split("+")[0] != expect.torchaudio:
        problems.append(f"torchaudio.__version__ is {version}, the Plan says {expect.torchaudio}")
    where = os.path.realpath(torchaudio.__file__)
    torch_dir = os.path.dirname(os.path.dirname(os.path.realpath(torch_module().__file__)))
    if expect.torch_file and os.path.dirname(os.path.dirname(where)) != torch_dir:
        problems.append(f"torchaudio was imported from {where}, not from the environment's {torch_dir}")
    loaded, said = extension_state(importlib.import_module)
    if loaded is False:
        problems.append("its C++ extension (torchaudio.lib._torchaudio, libtorchaudio) is not available")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome("passed", f"torchaudio {version} from {where} ({said}), imported in {took:.1f} s")


# Where each era keeps the flag: torchaudio/_extension.py (0.10 on; a package from 2.1), torchaudio/extension/ before
EXTENSION_MODULES = ("torchaudio._extension", "torchaudio.extension")
# The C++ extension's module before the flag existed (0.8/0.9: torchaudio/_torchaudio.pyd, absent from Windows wheels)
OLD_EXTENSION = "torchaudio._torchaudio"


def extension_state(import_module: Callable[[str], Any]) -> tuple[bool | None, str]:
    """Whether torchaudio's C++ extension loaded (None: the release has no flag to say), and how to say it."""
    for name in EXTENSION_MODULES:
        try:
            module = import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        loaded = getattr(module, "_IS_TORCHAUDIO_EXT_AVAILABLE", None)
        if loaded is not None:
            return bool(loaded), "its C++ extension loaded" if loaded else "its C++ extension did not load"
    try:
        import_module(OLD_EXTENSION)
    except ModuleNotFoundError as exc:
        if exc.name != OLD_EXTENSION:
            raise
        return None, f"no extension flag to read; this build ships no {OLD_EXTENSION}, so no C++ extension"
    return None, f"no extension flag to read; {OLD_EXTENSION} imported"


def check_spectrogram(expect: Expect) -> Outcome:
    peak, width = _peak_hz(_sine(RATE), RATE, N_FFT)
    if abs(peak - TONE) > width / 2:
        raise CheckFailed(f"the spectrogram of a {TONE:.0f} Hz sine peaks at {peak:.1f} Hz (bins of {width} Hz)")
    return Outcome("passed", f"Spectrogram(n_fft={N_FFT}) of a {TONE:.0f} Hz sine at {RATE} Hz: peak at {peak:.0f} Hz")


def _rms(wave: Any) -> float:
    return float(wave.pow(2).mean().sqrt())


def resampler(torchaudio: Any) -> Callable[[Any, int, int], Any]:
    """functional.resample (torchaudio 0.9 on), else the transform every release has (0.8)."""
    resample = getattr(torchaudio.functional, "resample", None)
    if resample is not None:
        return resample  # type: ignore[no-any-return]
    return lambda wave, rate, target: torchaudio.transforms.Resample(rate, target)(wave)


def check_resample(expect: Expect) -> Outcome:
    torchaudio = _torchaudio()
    wave = _sine(RATE)
    target = RATE // 2
    out = resampler(torchaudio)(wave, RATE, target)
    problems = []
    if tuple(out.shape) != (1, target):
        problems.append(f"1 s at {RATE} Hz resampled to {target} Hz has shape {tuple(out.shape)}, not (1, {target})")
    before, after = _rms(wave), _rms(out)
    if not math.isfinite(after) or abs(after - before) > ENERGY_TOLERANCE * before:
        problems.append(f"its RMS is {after:.4f}, the input's {before:.4f} (tolerance {ENERGY_TOLERANCE:.0%})")
    peak, width = _peak_hz(out, target, N_FFT // 2)
    if abs(peak - TONE) > width / 2:
        problems.append(f"its spectrogram peaks at {peak:.1f} Hz, not {TONE:.0f} Hz")
    if problems:
        raise CheckFailed("; ".join(problems))
    return Outcome(
        "passed", f"resample {RATE} -> {target} Hz: {out.shape[-1]} samples, RMS {after:.4f} (input {before:.4f}), "
        f"peak at {peak:.0f} Hz"
    )  # fmt: skip


CHECKS: dict[str, Callable[[Expect], Outcome]] = {
    "torchaudio import": check_torchaudio_import,
    "torchaudio spectrogram": check_spectrogram,
    "torchaudio resample": check_resample,
}
