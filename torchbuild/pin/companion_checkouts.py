"""The pin step for the companions compiled from a checkout against the cell's torch (matrix.yaml's ``packages:
{torchvision: {git_ref: v0.28.0}}``, ``--companion-source NAME=DIR``, ``--companion-ref NAME=REF``): each checkout
found (a ``git_ref`` cloned into the cache, as torch's is) and the version its wheel will carry read from it, before
the Plan is resolved.

The version is what the package's own setup.py makes of the checkout (torchvision's and torchaudio's: version.txt +
``+`` + the first 7 hex digits of HEAD, ``0.28.0a0+1a2b3c4``), or its ``build_version``. Beside a nightly torch
(``X.Y.Z.devYYYYMMDD``) it is the checkout's X.Y.Z with torch's night, ``0.29.0.dev20261120``, as upstream's vision
and audio nightlies are named: a package goes where its torch goes (a nightly's places, channels/nightly.py), and is
kept and pruned with the nights. The build stage passes the version to the setup.py (companions.yaml ``checkout:
version_env``) and checks the wheel carries it. A version whose nightliness is not torch's is refused.
"""

from __future__ import annotations

from pathlib import Path

from packaging.version import InvalidVersion, Version

from torchbuild.config.build_version import OwnBuild, labelled
from torchbuild.config.matrix import Matrix
from torchbuild.config.matrix_schema import PackageSource
from torchbuild.config.options import RunOptions
from torchbuild.errors import UserError
from torchbuild.host import checkout
from torchbuild.knowledge import pairing
from torchbuild.knowledge.companions import load
from torchbuild.run import state

VERSION_FILE = "version.txt"


def read(matrix: Matrix, options: RunOptions, own: OwnBuild | None, local_version: str) -> dict[str, pairing.Checkout]:
    """Each companion the matrix compiles, its checkout found and its version read (``own``: the cell's torch when it
    is a build of the users' own; ``local_version``: the cell's label, cpu or cu128)."""
    torch = Version(own.version) if own is not None else None
    nightly = torch is not None and torch.is_devrelease
    found = {}
    for name, source in matrix.package_sources:
        path, origin = _checkout(name, source, options)
        version, said = _version(name, path, source, torch if nightly else None)
        if version.is_devrelease != nightly:
            torch_is = f"a nightly, {torch}" if nightly else "not a nightly"
            raise UserError(
                f"{origin}: {name} {version} is {'a' if version.is_devrelease else 'not a'} nightly version, and this "
                f"cell's torch is {torch_is}: a package is published where its torch is (a nightly beside a "
                "nightly, in the nightly places), so give a build_version that is "
                f"{'not ' if not nightly else ''}a nightly (X.Y.Z.devN), or leave it out."
            )
        found[name] = pairing.Checkout(
            origin=f"{origin} ({said})", version=labelled(version, local_version),
            source_dir=str(path) if source.source_dir else "", git_url=_url(name, source) if source.git_ref else "",
            git_ref=source.git_ref or "",
        )  # fmt: skip
    return found


def _url(name: str, source: PackageSource) -> str:
    return source.git_url or load().packages[name].repository


def _checkout(name: str, source: PackageSource, options: RunOptions) -> tuple[Path, str]:
    if source.source_dir is not None:
        return Path(source.source_dir), f"--companion-source {name}={source.source_dir}"
    assert source.git_ref is not None
    url = _url(name, source)
    log = options.cache_dir / "logs" / f"pin-clone-{name}.log"
    return checkout.clone(url, source.git_ref, options.cache_dir, log).path, f"{url}@{source.git_ref}"


def _version(name: str, path: Path, source: PackageSource, night: Version | None) -> tuple[Version, str]:
    """The version of ``name``'s wheel built from ``path``, and what it was read from; ``night``: the nightly torch
    whose night it takes."""
    if source.build_version is not None:
        return Version(source.build_version), f"build_version {source.build_version}"
    version_txt = path / VERSION_FILE
    if not version_txt.is_file():
        raise UserError(f"{path}: no {VERSION_FILE}, so this is no checkout of {name} (its setup.py reads its version "
                        f"from {VERSION_FILE}): give the root of a {name} checkout, or a build_version.")  # fmt: skip
    text = version_txt.read_text(encoding="utf-8").strip().splitlines()[0].strip() if version_txt.stat().st_size else ""
    try:
        base = Version(text)
    except InvalidVersion:
        raise UserError(f"{version_txt} says {text!r}, which is not a PEP 440 version (e.g. 0.28.0a0).") from None
    if night is not None:
        return Version(f"{base.base_version}.dev{night.dev}"), f"{VERSION_FILE} {text}, torch's night {night.dev}"
    head = checkout.head_commit(path)
    if head is None:
        return base, f"{VERSION_FILE} {text}, not a git checkout"
    return Version(f"{base}+{head[:7]}"), f"{VERSION_FILE} {text}, HEAD {head[:7]}"


def recorded(path: Path) -> dict[str, pairing.Checkout]:
    """The checkouts the build job that recorded ``path`` (its state.json) compiled, with the versions it read, so
    that the smoke job resolves the same Plan without the checkouts."""
    found = {}
    for entry in state.recorded_companions(path):
        compiled = entry.get("compiled")
        if isinstance(entry.get("name"), str) and isinstance(compiled, dict):
            fields = {key: compiled.get(key) for key in ("origin", "version", "source_dir", "git_url", "git_ref")}
            if all(isinstance(value, str) for value in fields.values()):
                found[str(entry["name"])] = pairing.Checkout(**fields)  # type: ignore[arg-type]
    return found
