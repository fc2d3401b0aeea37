"""A package a cell ships (torch, torchvision, torchaudio, and whatever comes next): one entry of ``Plan.packages``.

Every stage runs one code path over the entries. What differs between torch and a package built beside it is data
here, not a module of its own: ``links_against`` names the shipped packages whose libraries are loaded before its
own (``import torch`` first), so that its repair leaves theirs to them and never vendors them, its conda package
pins their exact builds (``depends``) and verify resolves its binaries against their packages. The first entry,
torch, links against nothing: its artifacts carry the plain names (``repaired_wheel``), every other entry's carry
its name (``repaired_wheel[torchvision]``, stages/__init__.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchbuild.config import companions
from torchbuild.config.pairing import Companion


@dataclass(frozen=True, kw_only=True)
class ShippedPackage:
    name: str
    release: str  # 2.5.1, 0.20.1
    wheel: str  # the file name of its input wheel (PyPI's for a package fetched by sha256)
    sha256: str = ""  # what the data pins of that wheel; "" for a wheel the cell builds or is given
    requested: bool = True  # named in packages / --packages: a failed fetch fails the stage instead of leaving it out
    package: str = ""  # its conda package's file stem
    depends: tuple[str, ...] = ()  # its conda run requirements on the others (Python, the cell's exact pytorch build)
    links_against: tuple[str, ...] = ()  # the shipped packages whose libraries are loaded before its own
    # What its extension modules import that it loads only where installed (FFmpeg's DLLs for torchaudio), by library
    on_demand: tuple[tuple[str, tuple[str, ...]], ...] = ()
    repository: str = ""  # its source repository (companions.yaml packages), its conda package's about.home

    @property
    def on_demand_dlls(self) -> dict[str, str]:
        """Each DLL loaded on demand (lower case) -> its library (FFmpeg)."""
        return {dll.lower(): library for library, dlls in self.on_demand for dll in dlls}

    @property
    def is_root(self) -> bool:
        """The package the others are loaded beside (torch): it links against no other shipped package."""
        return not self.links_against


def beside(companion: Companion, root: str) -> ShippedPackage:
    """The entry of a package the stages build beside ``root`` (torch) from the wheel the Plan chose for it."""
    return ShippedPackage(
        name=companion.name,
        release=companion.release or "",
        wheel=companion.wheel,
        sha256=companion.sha256,
        requested=companion.requested,
        package=companion.package,
        depends=companion.depends,
        links_against=(root,),
        on_demand=companion.on_demand,
        repository=companions.load().packages[companion.name].repository,
    )
