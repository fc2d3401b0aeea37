"""Windows environments laid out on this host, for the win-64 checks that run under Wine:

- ``python_env``: python.org's embeddable CPython (python_embed.py) with ``Lib\\site-packages`` on its path, where
  wheels are installed (dependencies.install): a fresh environment as pip makes one on Windows.
- ``conda_layout``: the same interpreter at the root of a prefix laid out as conda installs the cell's package: the
  package's files where its paths put them (``Lib\\site-packages\\torch``), and ``Library\\bin`` holding the DLLs its
  run dependencies install (vc14_runtime, intel-openmp, ...: dll_providers.yaml ``conda_packages``), taken from the
  same vendor wheels the repair takes them from. It is that layout, not a conda install: no solver ran and the run
  dependencies are their DLLs only.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from torchbuild.knowledge import dll_providers
from torchbuild.knowledge.dll_providers import ProviderData
from torchbuild.platforms.windows import providers
from torchbuild.platforms.windows.python_embed import Embedded

SITE_PACKAGES = "Lib/site-packages"
LIBRARY_BIN = "Library/bin"


def python_env(embedded: Embedded, prefix: Path) -> None:
    """The embeddable CPython copied to ``prefix``, with ``Lib\\site-packages`` on sys.path and ``site`` imported
    (its ``._pth`` file lists the path and otherwise turns ``site`` off: no .pth files, no sitecustomize)."""
    if prefix.exists():
        shutil.rmtree(prefix)
    shutil.copytree(embedded.root, prefix)
    (prefix / SITE_PACKAGES).mkdir(parents=True)
    tag = embedded.tag
    lines = [f"python{tag}.zip", ".", SITE_PACKAGES.replace("/", "\\"), "import site"]
    (prefix / f"python{tag}._pth").write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))


@dataclass(frozen=True)
class LibraryBin:
    placed: tuple[tuple[str, str, str], ...]  # (DLL, run dependency, provider wheel)
    not_placed: tuple[str, ...]  # patterns with the reason

    def describe(self) -> str:
        by_package: dict[str, list[str]] = {}
        for dll, package, _wheel in self.placed:
            by_package.setdefault(package, []).append(dll)
        text = "; ".join(f"{p}: {', '.join(sorted(d))}" for p, d in sorted(by_package.items())) or "nothing"
        if self.not_placed:
            text += f" (not placed: {'; '.join(self.not_placed)})"
        return text


def library_bin(
    prefix: Path,
    provided: Mapping[str, str],
    data: ProviderData,
    *,
    cuda: str,
    cudnn: int | None,
    python: str,
    cache_dir: Path,
    log: Path,
) -> LibraryBin:
    """``Library\\bin`` of ``prefix`` with the DLLs of ``provided`` (DLL pattern -> run dependency): each from the
    vendor wheel of its dll_providers.yaml provider. A pattern no wheel provides (ucrtbase.dll: part of Windows 10
    and of Wine) is listed as not placed, with the reason."""
    target = prefix / LIBRARY_BIN
    target.mkdir(parents=True, exist_ok=True)
    placed: list[tuple[str, str, str]] = []
    not_placed: list[str] = []
    for pattern, package in sorted(provided.items()):
        provider = data.provider_for(pattern)
        if provider is None:
            not_placed.append(f"{pattern} of {package}: no vendor wheel provides it")
            continue
        try:
            hits = providers.locate(
                [pattern], data, cuda=cuda, cudnn=cudnn, python=python, cache_dir=cache_dir, log=log, on_windows=False
            )
        except dll_providers.ProviderError as exc:
            not_placed.append(f"{pattern} of {package}: {exc}")
            continue
        for hit in hits:
            shutil.copyfile(hit.path, target / hit.name)
            placed.append((hit.name, package, hit.wheel.filename if hit.wheel else hit.origin))
    return LibraryBin(tuple(placed), tuple(not_placed))
