"""A package a cell ships (torch, torchvision, torchaudio, and whatever comes next): one entry of ``Plan.packages``,
with its conda package (CondaPackage).

Every stage runs one code path over the entries. What differs between torch and a package built beside it is data
here, not a module of its own: ``links_against`` names the shipped packages whose libraries are loaded before its
own (``import torch`` first), so that its repair leaves theirs to them and never vendors them, its conda package
pins their exact builds (``conda.depends``) and verify resolves its binaries against their packages. The root,
torch, links against nothing and is what the others link against: its wheel is the cell's own (the source and build
stages make it), its artifacts carry the plain names (``repaired_wheel``), every other entry's carry its name
(``repaired_wheel[torchvision]``, stages/__init__.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torchbuild.knowledge import companions
from torchbuild.knowledge.pairing import Companion
from torchbuild.wheel.wheelfile import WheelTags


@dataclass(frozen=True, kw_only=True)
class CondaPackage:
    """One shipped package's conda package: its name, version and build, its run requirements on the others and the
    cell's environment, and its file. What every package of the cell shares (subdir, site-packages, ...) is the
    cell's (plan/model.py CondaTarget)."""

    name: str  # pytorch, torchvision
    version: str
    build_string: str  # the cell's: py3.11_cpu_0 (a package built beside torch takes torch's)
    build_number: int
    depends: tuple[str, ...]  # torch: what packaging.yaml adds; beside torch: Python and the cell's exact pytorch
    constrains: tuple[str, ...] = ()
    filename: str  # the .conda file
    archives: Mapping[str, str]  # archive format (conda, tar.bz2) -> file name

    @property
    def stem(self) -> str:
        """The file name without its archive suffix: ``pytorch-2.5.1-py3.11_cpu_0``."""
        return self.filename.removesuffix(".conda")


def conda_package(
    name: str,
    version: str,
    build_string: str,
    build_number: int,
    depends: tuple[str, ...],
    constrains: tuple[str, ...] = (),
) -> CondaPackage:
    """The conda package ``name`` ``version`` of the cell's build, with its file names in both archive formats."""
    stem = f"{name}-{version}-{build_string}"
    return CondaPackage(
        name=name,
        version=version,
        build_string=build_string,
        build_number=build_number,
        depends=depends,
        constrains=constrains,
        filename=f"{stem}.conda",
        archives={"conda": f"{stem}.conda", "tar.bz2": f"{stem}.tar.bz2"},
    )


@dataclass(frozen=True, kw_only=True)
class PackageBuild:
    """How the build stage compiles a package beside torch from a checkout, against the cell's torch wheel."""

    origin: str  # what the plan says of the checkout: --companion-source torchvision=/src/vision (HEAD 1a2b3c4)
    source_dir: str  # a checkout on this machine; "" where git_ref names one to clone
    git_url: str
    git_ref: str
    version: str  # what its wheel carries: 0.28.0a0+1a2b3c4, as its setup.py makes it
    # What its setup.py reads (companions.yaml checkout): the version it carries, the torch its Requires-Dist pins
    env: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class ShippedPackage:
    name: str
    release: str  # 2.5.1, 0.20.1
    wheel: str  # the file name of its wheel: torch's as the Plan names it; PyPI's for a package fetched by sha256
    conda: CondaPackage
    sha256: str = ""  # what the data pins of that wheel; "" for a wheel the cell builds or is given
    requested: bool = True  # named in packages / --packages: a failed fetch fails the stage instead of leaving it out
    links_against: tuple[str, ...] = ()  # the shipped packages whose libraries are loaded before its own
    # What its extension modules import that it loads only where installed (FFmpeg's DLLs for torchaudio), by library
    on_demand: tuple[tuple[str, tuple[str, ...]], ...] = ()
    repository: str = ""  # its source repository (companions.yaml packages), its conda package's about.home
    build: PackageBuild | None = None  # compiled from a checkout against the cell's torch; None: a wheel it is given

    @property
    def origin(self) -> str:
        """Where its wheel comes from, for the messages and the provenance: PyPI's file, or the checkout."""
        return f"compiled from {self.build.origin}" if self.build else f"PyPI's {self.wheel}"

    @property
    def on_demand_dlls(self) -> dict[str, str]:
        """Each DLL loaded on demand (lower case) -> its library (FFmpeg)."""
        return {dll.lower(): library for library, dlls in self.on_demand for dll in dlls}

    @property
    def is_root(self) -> bool:
        """The package the others are loaded beside (torch): it links against no other shipped package."""
        return not self.links_against

    @property
    def torch_pin(self) -> str:
        """The conda requirement on the cell's exact pytorch build that a package built beside torch has (the last of
        its ``conda.depends``)."""
        return self.conda.depends[-1]


def beside(companion: Companion, root: ShippedPackage, tags: WheelTags, torch_version: str) -> ShippedPackage:
    """The entry of a package the stages build beside ``root`` (torch, of ``torch_version``: 2.13.0+cpu) from the
    wheel the Plan chose for it, or from its checkout compiled against torch's wheel (its wheel named with the cell's
    ``tags``); its conda package takes the root's build string (a compiled one's with the checkout's own label) and
    number."""
    release = companion.release or ""
    package = companions.load().packages[companion.name]
    wheel, build = companion.wheel, None
    if companion.compiled is not None and companion.compiled.version is not None:
        checkout = companion.compiled
        version = checkout.version or ""
        wheel = f"{companion.name}-{version}-{tags.interpreter}-{tags.abi}-{tags.platform}.whl"
        env = {package.version_env: version, package.torch_env: torch_version}
        build = PackageBuild(origin=checkout.origin, source_dir=checkout.source_dir, git_url=checkout.git_url,
                             git_ref=checkout.git_ref, version=version,
                             env={name: value for name, value in env.items() if name})  # fmt: skip
    return ShippedPackage(
        name=companion.name,
        release=release,
        wheel=wheel,
        conda=conda_package(
            companion.name, release, companion.build_string or root.conda.build_string, root.conda.build_number,
            companion.depends,
        ),
        sha256=companion.sha256,
        requested=companion.requested,
        links_against=(root.name,),
        on_demand=companion.on_demand,
        repository=package.repository,
        build=build,
    )
