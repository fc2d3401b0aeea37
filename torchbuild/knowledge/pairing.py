"""Which torchvision / torchaudio a cell ships beside its torch, resolved once into the Plan (companions.yaml).

A companion ships when a release pairs with the cell's torch, its torch requirement admits the cell's torch
version, PyPI has its wheel for the cell's platform and Python, and that wheel is the cell's kind of build: a CUDA
build links libtorch_cuda.so (and its CUDA runtime), which a CPU torch does not have, so it fails at import; a CPU
build beside a CUDA torch lacks the CUDA operators. Asked for by default (``packages`` not given), a companion that
cannot ship says why in one line; named in ``packages`` (or ``--packages``), it is refused before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from torchbuild.errors import UserError, one_of
from torchbuild.knowledge.companions import (
    WHERE,
    Build,
    Release,
    Table,
    load,
    parse_package,
)
from torchbuild.knowledge.compat import version_key

NOT_BUILT = "not built yet (the stages ship torch only)"
# What the stages build from PyPI's wheel beside torch, by platform, is data (companions.yaml packages: built_on,
# not_built); the others stay NOT_BUILT, with the reason where the data gives one.


@dataclass(frozen=True, kw_only=True)
class Checkout:
    """A companion's checkout, compiled against the cell's torch instead of taking PyPI's wheel: where it is, what
    the plan says of it, and the version its wheel carries as the pin step read it (None: not read yet, a ``plan``
    without the pin step)."""

    origin: str  # --companion-source torchvision=/src/vision (version.txt 0.28.0a0, HEAD 1a2b3c4)
    version: str | None  # 0.28.0a0+1a2b3c4, 0.29.0.dev20261120+cpu
    source_dir: str = ""  # a checkout on this machine; "" where git_ref names one to clone
    git_url: str = ""
    git_ref: str = ""


@dataclass(frozen=True, kw_only=True)
class Companion:
    """One companion of a cell: the release and wheel chosen for the cell's target, or why none ships."""

    name: str
    release: str | None  # None: not shipped (``reason`` says why)
    requested: bool  # named in packages / --packages (else asked for by default)
    paired: str | None = None  # the release named or paired with the cell's torch, shipped or not (a checkout's tag)
    requires_torch: str = ""  # the wheel's Requires-Dist on torch ("" where it declares none)
    build: str = ""  # its local label (cpu, cu130) or "pure Python"
    wheel: str = ""  # PyPI's file for the cell's platform and Python
    sha256: str = ""
    paired_by: str = ""  # what the data's pairing rests on (metadata, the project's table)
    yanked: str = ""  # PyPI's reason where the wheel is yanked there (installed only when pinned exactly)
    reason: str = ""  # why it is not shipped
    # Built by the stages (win-64 torchvision): its conda package's file stem and run requirements on the cell's exact
    # pytorch build (and Python); "" / () where the stages do not build it (``not_built`` says why)
    package: str = ""
    depends: tuple[str, ...] = ()
    not_built: str = ""
    # What its extension modules import that it loads only where installed (FFmpeg's DLLs for torchaudio's torio
    # extensions), by library, from companions.yaml: the closure checks accept exactly these and name them
    on_demand: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # What the pin step found the configured package indexes offer where it is not the release that pairs ("0.29.2
    # pairs; the indexes offer up to 0.29.1: taken"), or that they offer none of its series; "" where they offer it
    offered: str = ""
    # Compiled from a checkout against the cell's torch (no PyPI wheel: ``wheel`` and ``sha256`` are ""), and its
    # conda package's build string (torch's, with the checkout's own label: py3.11_cpu_1a2b3c4_0)
    compiled: Checkout | None = None
    build_string: str = ""

    @property
    def on_demand_dlls(self) -> dict[str, str]:
        """Each DLL loaded on demand (lower case) -> its library (FFmpeg)."""
        return {dll.lower(): library for library, dlls in self.on_demand for dll in dlls}

    @property
    def built(self) -> bool:
        return bool(self.package)

    @property
    def detail(self) -> str:
        """What the plan says of it after its name."""
        if self.compiled is not None:
            compiled = f"compiled from {self.compiled.origin} against this cell's torch"
            if self.compiled.version is None:
                return f"{compiled} (its version is read from the checkout when a run pins it)"
            return f"{self.compiled.version}: {compiled}, the stages build {self.package}.conda, which requires " \
                f"{self.depends[-1]}"  # fmt: skip
        if self.release is None:
            return f"not shipped: {self.reason}"
        requires = f"requires torch{self.requires_torch}" if self.requires_torch else "declares no torch requirement"
        yanked = f", yanked there: {self.yanked}" if self.yanked else ""
        offered = f"; {self.offered}" if self.offered else ""
        paired = f"{self.release}: paired ({requires}; PyPI's {self.wheel}{yanked}{offered})"
        if self.built:
            return f"{paired}, the stages build {self.package}.conda, which requires {self.depends[-1]}"
        return f"{paired}, " + (f"not built yet: {self.not_built}" if self.not_built else NOT_BUILT)

    @property
    def line(self) -> str:
        """What the plan and the run say of it, in one line."""
        return f"{self.name}{':' if self.release is None else ''} {self.detail}"


@dataclass(frozen=True, kw_only=True)
class Target:
    """What the choice needs of the cell."""

    platform: str
    python: str
    torch_release: str  # 2.13.0
    torch_version: str  # 2.13.0+cpu: what the companion's torch requirement must admit
    local_version: str  # cpu | cu130
    # The cell's exact conda build ("pytorch 2.5.1 py3.11_cpu_0"), its build string and Python spec: what a companion
    # built beside it pins ("" where the stages build no companion: a Target for the choice alone)
    torch_package: str = ""
    build_string: str = ""
    python_spec: str = ""

    @property
    def nightly(self) -> bool:
        """The cell's torch is a nightly (X.Y.Z.devN): its companions are compiled against it, as upstream's are."""
        return Version(self.torch_version).is_devrelease


def torch_pins(platform: str, torch_package: str, depends: tuple[str, ...]) -> dict[str, str]:
    """What a companion built beside the cell's torch pins (Target's torch_package, build_string, python_spec, from
    the cell's conda package and its run dependencies): none where the stages build none."""
    if not load().built_on(platform):
        return {}
    python = next((d for d in depends if d.split()[0] == "python"), "")
    return {"torch_package": torch_package, "build_string": torch_package.split()[-1], "python_spec": python}


@dataclass(frozen=True, kw_only=True)
class Offered:
    """What the pin step found the configured package indexes offer of a companion's candidates (``candidates``):
    the newest offered (None: none), and what the plan says of it."""

    release: str | None
    note: str


def _compile_hint(name: str, release: str) -> str:
    return (
        f"to ship one, name a checkout the stages compile against this cell's torch: packages: {{{name}: {{git_ref: "
        f"v{release}}}}} in matrix.yaml, --companion-ref {name}=v{release} (from {load().packages[name].repository}), "
        f"or --companion-source {name}=DIR"
    )


def _nightly_mismatch(release: Release, build: Build, target: Target) -> str | None:
    """Why a prebuilt wheel cannot ship beside a nightly torch: it was built against a release's C++ ABI, and a
    nightly's companions are compiled against that nightly (upstream's are); None beside a release, or for a
    pure-Python wheel."""
    if not target.nightly or build.platform == "any":
        return None
    return (
        f"this cell's torch is a nightly ({target.torch_version}): PyPI's {target.platform} wheel of {release.name} "
        f"{release.version} was built against a release of torch, whose C++ ABI a nightly's libraries are not known "
        f"to keep, and a nightly's companions are published beside it in the nightly places, as nightlies of the "
        f"same night; {_compile_hint(release.name, release.version)} (beside a nightly its version is the "
        "checkout's X.Y.Z.devN of torch's night)"
    )


def _kind(build: Build) -> str:
    if build.label.startswith("cu"):
        return f"a CUDA {build.label[2:-1]}.{build.label[-1]} build (+{build.label})"
    return "a CUDA build" if build.cuda_libraries else f"a CPU build (+{build.label or 'no label'})"


def _mismatch(release: Release, build: Build, target: Target) -> str | None:
    """Why ``build`` cannot load beside (or serve) the cell's torch build; None where it can."""
    if build.platform == "any" or build.label == target.local_version:
        return None
    name, version, platform = release.name, release.version, target.platform
    cuda = build.cuda_libraries
    if target.local_version == "cpu":
        if not cuda and not build.label.startswith("cu"):
            return None  # an unlabelled CPU build (links no CUDA library)
        libraries = f" linking {', '.join(cuda)}" if cuda else ""
        return (
            f"PyPI's {platform} wheel of {name} {version} is {_kind(build)}{libraries}, which this cell's CPU torch "
            f"does not have (it fails at import), and PyPI has no CPU build of it; {_compile_hint(name, version)}"
        )
    if build.label.startswith("cu") or cuda:
        runtime = [n for n in build.links or () if n.startswith("libcudart.so")]
        linking = f" linking {', '.join(runtime)}" if runtime else ""
        return (
            f"PyPI's {platform} wheel of {name} {version} is {_kind(build)}{linking}; this cell's torch is "
            f"+{target.local_version} (its CUDA runtime must be the cell's, two CUDA runtimes cannot serve one "
            f"process); {_compile_hint(name, version)}"
        )
    return (
        f"PyPI's {platform} wheel of {name} {version} is {_kind(build)}: beside this cell's CUDA torch its CUDA "
        f"operators would be missing; {_compile_hint(name, version)}"
    )


def _ship(release: Release, target: Target) -> tuple[Build | None, str]:
    """The build of ``release`` that ships with the cell, or why none does."""
    name, version = release.name, release.version
    build = release.build_for(target.platform)
    if build is None:
        return None, f"PyPI has no {target.platform} wheel of {name} {version}; {_compile_hint(name, version)}"
    if not build.admits(target.torch_version):
        return None, (
            f"{name} {version} requires torch{build.requires_torch} (its wheels' Requires-Dist); this cell's torch is "
            f"{target.torch_version}"
        )
    if (why := _mismatch(release, build, target) or _nightly_mismatch(release, build, target)) is not None:
        return None, why
    if build.wheel_for(target.python) is None:
        pythons = sorted(build.wheels, key=lambda p: version_key(p.rstrip("t")))
        return None, (
            f"PyPI has no Python {target.python} wheel of {name} {version} for {target.platform} "
            f"(it has {one_of(pythons)})"
        )
    return build, ""


def candidates(name: str, target: Target, table: Table | None = None) -> tuple[str, ...]:
    """The releases of ``name`` that can ship with the cell, newest first: the one the data pairs with the cell's
    torch, then the older releases of its series (0.29.x) whose wheel ships with the cell too (its torch requirement
    admits the cell's torch: 0.29.1's ``>=2.14.0`` does, 0.29.0's ``==2.14.0`` not for 2.14.1); none where no release
    pairs or the paired one cannot ship (``choose`` says why)."""
    table = table or load()
    paired = table.pair(name, target.torch_release).release
    if paired is None or _ship(table.release(name, paired), target)[0] is None:
        return ()
    series = Version(paired).release[:2]
    older = [v for v in table.releases[name] if Version(v).release[:2] == series and Version(v) < Version(paired)]
    older.sort(key=Version, reverse=True)
    return (paired, *(v for v in older if _ship(table.release(name, v), target)[0] is not None))


def _second_openmp(table: Table, release: Release, build: Build, target: Target) -> str:
    """Why ``import torch, <companion>`` would load a second OpenMP runtime (verify's TB114), from the runtimes the
    data read from both wheels; "" where they share one, or where either was not read."""
    torch_runtimes = table.torch_openmp.get(target.platform, {}).get(target.torch_release)
    if not build.openmp or not torch_runtimes:
        return ""  # not read, or one side imports none: at most the other's runtime in the process
    own = {dll.lower() for dll in torch_runtimes}
    other = [dll for dll in build.openmp if dll.lower() not in own]
    if not other:
        return ""
    return (
        f"PyPI's {target.platform} wheel of {release.name} {release.version} imports {', '.join(other)} and torch "
        f"{target.torch_release}'s imports {', '.join(torch_runtimes)} ({WHERE}, read from both wheels): "
        f"`import torch, {release.name}` would load two OpenMP runtimes into one process (verify's TB114 stops such "
        "a cell)"
    )


def _choose(
    table: Table, name: str, pinned: str | None, target: Target, requested: bool, taken: Offered | None
) -> Companion:
    pair = table.pair(name, target.torch_release)
    if taken is not None and taken.release is None:
        return Companion(
            name=name, release=None, requested=requested, paired=pair.release, reason=taken.note, offered=taken.note
        )
    version = pinned or (taken.release if taken is not None else pair.release)
    if version is None:
        return Companion(name=name, release=None, requested=requested, reason=pair.none)
    release = table.release(name, version)
    build, why = _ship(release, target)
    if build is not None and (clash := _second_openmp(table, release, build, target)):
        build, why = None, clash
    if build is None:
        if pinned and pair.release and pair.release != pinned:
            why += f"; {name} {pair.release} is the release that pairs with torch {target.torch_release}"
        return Companion(name=name, release=None, requested=requested, paired=version, reason=why)
    wheel = build.wheel_for(target.python)
    assert wheel is not None  # _ship checked it
    package = table.packages[name]
    why_not = package.why_not_built(target.platform, target.local_version)
    built = bool(target.torch_package) and target.platform in package.built_on and why_not is None
    return Companion(
        package=f"{name}-{version}-{target.build_string}" if built else "",
        depends=tuple(d for d in (target.python_spec, target.torch_package) if d) if built else (),
        not_built=(why_not or "") if target.torch_package and not built else "",
        name=name,
        release=version,
        requested=requested,
        paired=version,
        requires_torch=build.requires_torch,
        build="pure Python" if build.platform == "any" else build.label,
        wheel=wheel.file,
        sha256=wheel.sha256,
        paired_by=f"named in packages; {WHERE} pairs {pair.release}" if pinned else pair.by,
        yanked=build.yanked,
        on_demand=tuple((library, tuple(dlls)) for library, dlls in build.on_demand.items()) if built else (),
        offered=taken.note if taken is not None else "",
    )


def _label(version: str, local_version: str) -> str:
    """A conda build string's part for a compiled companion's own local label (a checkout's 1a2b3c4): ``1a2b3c4_``,
    so that two checkouts of one version are two conda files; "" for the accelerator's (cpu, cu128) or none."""
    local = Version(version).local
    if local is None or local == local_version:
        return ""
    return re.sub(r"[^A-Za-z0-9_.]", "_", local) + "_"


def compiled_build_string(torch_build: str, version: str, local_version: str) -> str:
    """The build string of a companion compiled from a checkout: torch's (py3.11_cpu_0) with the checkout's own
    label before its build number (py3.11_cpu_1a2b3c4_0)."""
    head, _, number = torch_build.rpartition("_")
    return f"{head}_{_label(version, local_version)}{number}"


def _compiled(name: str, checkout: Checkout, target: Target) -> Companion:
    """``name`` compiled from ``checkout`` against the cell's torch: its conda package pins the cell's exact pytorch
    build, as a paired one's does."""
    if checkout.version is None or not target.torch_package:
        return Companion(name=name, release=None, requested=True, compiled=checkout)
    version = Version(checkout.version)
    build_string = compiled_build_string(target.build_string, checkout.version, target.local_version)
    return Companion(
        name=name, release=version.public, requested=True, paired=version.public, build=version.local or "",
        package=f"{name}-{version.public}-{build_string}",
        depends=tuple(d for d in (target.python_spec, target.torch_package) if d),
        paired_by=f"compiled from {checkout.origin}", compiled=checkout, build_string=build_string,
    )  # fmt: skip


def choose(
    packages: Sequence[str] | None,
    target: Target,
    table: Table | None = None,
    offered: Mapping[str, Offered] | None = None,
    compiled: Mapping[str, Checkout] | None = None,
) -> tuple[Companion, ...]:
    """Each companion of the cell: those ``packages`` names (None: every companion, shipped where it can be).
    ``offered``: what the pin step found the indexes offer of a companion (not named with a release) where that is
    not the release that pairs; ``compiled``: the companions compiled from a checkout against the cell's torch
    (they ship, whatever PyPI has). A named companion that cannot ship is refused (UserError) with its reason."""
    table = table or load()
    offered = offered or {}
    compiled = compiled or {}
    named = dict(parse_package(text) for text in packages) if packages is not None else None
    chosen = []
    for name in table.names:
        if name in compiled:
            chosen.append(_compiled(name, compiled[name], target))
            continue
        if named is not None and name not in named:
            continue
        requested = named is not None
        pinned = named.get(name) if named else None
        companion = _choose(table, name, pinned, target, requested, None if pinned else offered.get(name))
        if requested and companion.release is None:
            raise UserError(
                f"{name} cannot ship with torch {target.torch_version} ({target.platform}, Python {target.python}): "
                f"{companion.reason}. Leave {name} out of packages (matrix.yaml or --packages), or choose another "
                f"cell; valid packages: {one_of(['torch', *table.names])}."
            )
        chosen.append(companion)
    return tuple(chosen)
