"""What may enter a channel: the checks ``publish`` gives every artifact before the first byte is written (the verify
stage's checks that need no Plan), and the place a file must have in a channel (a conda package in the subdir its
own index.json names, a wheel below its own project's page). ``index`` applies the same rules to files put into a
channel by other means, so that an index never lists what publish would have refused."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from packaging.utils import InvalidWheelFilename

from torchbuild.channels import nightly, project_of
from torchbuild.conda.archive import PackageUnreadable, read_package
from torchbuild.conda.checks.package import check_package
from torchbuild.errors import UserError, one_of
from torchbuild.results import failures
from torchbuild.wheel.checks import check_wheel

Kind = Literal["conda", "wheel"]


def validate(path: Path, kind: Kind, nothing: str = "nothing was published") -> None:
    """The verify stage's checks of a package or wheel that need no Plan; UserError naming the file and every failed
    check. A wheel's tags are checked against its own file name, a conda package's index.json against its file
    name."""
    failed = failures(check_wheel(path) if kind == "wheel" else check_package(path))
    if failed:
        problems: dict[str, list[str]] = {}  # one line per problem, with every check it fails
        for check in failed:
            problems.setdefault(check.message, []).append(check.code)
        lines = "\n".join(f"  {', '.join(codes)}: {message}" for message, codes in problems.items())
        what = "wheel" if kind == "wheel" else "conda package"
        raise UserError(f"{path} is not a valid {what}; {nothing}:\n{lines}")


@functools.cache
def conda_subdirs() -> tuple[str, ...]:
    """Every conda subdir (platform) there is, as py-rattler knows them."""
    from rattler import Platform

    return tuple(str(platform) for platform in Platform.all())


def package_subdir(path: Path) -> str:
    """The subdir a package's own info/index.json names; UserError when it cannot be read."""
    return read_package(path, payload=False).subdir


def check_place(path: Path, channel: Path) -> None:
    """``path`` (a package or wheel file inside ``channel``) lies where the channel's layout puts it: a package in
    the folder of the subdir its index.json names, a wheel in whl/simple/<its project>/ (a nightly's in
    label/nightly/<subdir>/, whl/nightly/simple/<its project>/). UserError naming the file and where it belongs."""
    relative = path.relative_to(channel)
    wheel = path.name.endswith(".whl")
    root = nightly.simple_root(path.name) if wheel else nightly.conda_root(path.name)
    if relative.parts[:-2] != tuple(part for part in root.split("/") if part):
        what = ("a nightly " if nightly.is_nightly(path.name) else "a release ") + ("wheel" if wheel else "package")
        belongs = f"{channel / root}/<its project>/" if wheel else f"{channel / root if root else channel}/<subdir>/"
        raise UserError(f"{path}: {what} belongs in {belongs}")
    check_folder(path, relative.parts[-2], str(path))


def check_folder(path: Path, folder: str, where: str) -> None:
    """The file at ``path`` (shown as ``where``) is a package of the subdir ``folder``, or a wheel of the project
    ``folder``."""
    if path.name.endswith(".whl"):
        try:
            project = project_of(path.name)
        except InvalidWheelFilename as exc:
            raise UserError(f"{where}: not a wheel's file name ({exc})") from None
        if project != folder:
            raise UserError(f"{where}: a wheel of the project '{project}' belongs on the page "
                            f"{nightly.simple_root(path.name)}/{project}/, not on {folder}'s")  # fmt: skip
        return
    if folder not in conda_subdirs():
        raise UserError(f"{where}: '{folder}' is not a conda subdir, so no installer looks there. Subdirs: "
                        f"{one_of(conda_subdirs())}")  # fmt: skip
    try:
        subdir = package_subdir(path)
    except PackageUnreadable as exc:
        raise UserError(str(exc).replace(str(path), where)) from None
    if subdir != folder:
        raise UserError(f"{where}: its info/index.json says subdir {subdir}, so it belongs in {subdir}/, not {folder}/")


def admit(path: Path, folder: str, where: str) -> None:
    """A file found in a channel (downloaded to ``path`` from ``where``) that ``index`` is to list: in its place, and
    passing publish's checks."""
    check_folder(path, folder, where)
    kind: Kind = "wheel" if path.name.endswith(".whl") else "conda"
    try:
        validate(path, kind, nothing="nothing was indexed")
    except UserError as exc:
        raise UserError(str(exc).replace(str(path), where)) from None
