"""Package checks of a conda package's content: conda-verify's C1117-C1147 (members, info/files, prefixes,
forbidden files, PE machine, paths.json hashes and sizes) and torchbuild's TB101-TB103 (paths.json lists exactly the
payload, Windows MAX_PATH, the .conda container layout)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import PurePosixPath

from torchbuild.conda.archive import (
    BINARY_PLACEHOLDER_LENGTH,
    FORBIDDEN_TOP,
    LINK_SCRIPTS,
    PE_SUFFIXES,
    CondaArchive,
    Outcome,
    is_ascii,
    package_check,
    paths_json,
    prefix_entries,
)
from torchbuild.config import nesting
from torchbuild.wheel.path_budget import CONDA_ENV, CONDA_ROOT, WIN_PATH_LIMIT


@package_check("C1117", "no duplicate archive members")
def c1117(pkg: CondaArchive) -> Outcome:
    counts = Counter(m.name for m in (*pkg.info_members, *pkg.pkg_members))
    return [f"{name} ({n} times)" for name, n in sorted(counts.items()) if n > 1]


@package_check("C1118", "archive member names are ASCII")
def c1118(pkg: CondaArchive) -> Outcome:
    return [repr(m.name) for m in (*pkg.info_members, *pkg.pkg_members) if not is_ascii(m.name.encode("utf-8"))]


def _info_files(pkg: CondaArchive) -> list[str] | None:
    raw = pkg.info.get("info/files")
    return None if raw is None else [line.strip() for line in raw.decode("utf-8", "replace").splitlines()]


NO_INFO_FILES = "no info/files in the package (rattler-build lists the payload in info/paths.json only)"


@package_check("C1119", "info/files is ASCII")
def c1119(pkg: CondaArchive) -> Outcome:
    raw = pkg.info.get("info/files")
    if raw is None:
        return NO_INFO_FILES
    return [] if is_ascii(raw, pkg.is_windows) else ["info/files has non-ASCII bytes"]


@package_check("C1120", "info/files lists no info/ entries")
def c1120(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    return NO_INFO_FILES if listed is None else [f for f in listed if f.startswith("info/")]


@package_check("C1121", "info/files has no duplicates")
def c1121(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    return [f"{name} ({n} times)" for name, n in sorted(Counter(listed).items()) if n > 1]


@package_check("C1122", "every file in info/files is in the archive")
def c1122(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    present = {m.name for m in pkg.files()}
    return [
        f"{f} is listed but not in the archive" for f in listed if f and not f.startswith("info") and f not in present
    ]


@package_check("C1123", "every archive file is in info/files")
def c1123(pkg: CondaArchive) -> Outcome:
    listed = _info_files(pkg)
    if listed is None:
        return NO_INFO_FILES
    known = set(listed)
    return [f"{m.name} is not listed" for m in pkg.files() if m.name not in known]


@package_check("C1124", "no hard links; no symlinks in a Windows package")
def c1124(pkg: CondaArchive) -> Outcome:
    problems = [f"hard link {m.name}" for m in (*pkg.info_members, *pkg.pkg_members) if m.kind == "hardlink"]
    if pkg.is_windows:
        problems += [
            f"symlink {m.name} (Windows cannot create it without privileges)"
            for m in pkg.pkg_members
            if m.kind == "symlink"
        ]
    return problems


@package_check("C1125", "no conda-meta/, conda-bld/, pkgs/, envs/, .DS_Store or ~ backup files")
def c1125(pkg: CondaArchive) -> Outcome:
    problems: list[str] = []
    for member in pkg.pkg_members:
        path = PurePosixPath(member.name)
        if (path.parts and path.parts[0] in FORBIDDEN_TOP) or path.name == ".DS_Store" or member.name.endswith("~"):
            problems.append(member.name)
    return problems


@package_check("C1126", "no info/link.json in a non-noarch package")
def c1126(pkg: CondaArchive) -> Outcome:
    if pkg.subdir == "noarch" or "preferred_env" in pkg.index:
        return "a noarch package may have info/link.json"
    return [
        f"{name} in a {pkg.subdir} package"
        for name in ("info/link.json", "info/package_metadata.json")
        if name in pkg.info
    ]


@package_check("C1127", "no .bat and .exe with the same name")
def c1127(pkg: CondaArchive) -> Outcome:
    names = {m.name.lower(): m.name for m in pkg.files()}
    return [
        f"{names[n]} and {names[n[:-4] + '.exe']}"
        for n in sorted(names)
        if n.endswith(".bat") and n[:-4] + ".exe" in names
    ]


@package_check("C1128", "prefix entries are ASCII")
def c1128(pkg: CondaArchive) -> Outcome:
    raw = pkg.info.get("info/has_prefix")
    problems = [] if raw is None or is_ascii(raw, pkg.is_windows) else ["info/has_prefix has non-ASCII bytes"]
    return problems + [e.path for e in prefix_entries(pkg) if not is_ascii(e.path.encode("utf-8"))]


@package_check("C1129", "prefix entries name files in the package")
def c1129(pkg: CondaArchive) -> Outcome:
    present = {m.name for m in pkg.files()}
    return [f"{e.path} ({e.source})" for e in prefix_entries(pkg) if e.path not in present]


@package_check("C1130", "prefix modes are text or binary")
def c1130(pkg: CondaArchive) -> Outcome:
    return [f"{e.path}: mode '{e.mode}'" for e in prefix_entries(pkg) if e.mode not in ("text", "binary")]


@package_check("C1131", "no binary prefix in a python package")
def c1131(pkg: CondaArchive) -> Outcome:
    if pkg.index.get("name") != "python":
        return "only the python package is refused binary prefixes"
    return [e.path for e in prefix_entries(pkg) if e.mode == "binary"]


@package_check("C1132", "no binary prefix in a Windows package")
def c1132(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    return [e.path for e in prefix_entries(pkg) if e.mode == "binary"]


@package_check("C1133", "binary prefix placeholders are 255 bytes")
def c1133(pkg: CondaArchive) -> Outcome:
    return [
        f"{e.path}: {len(e.placeholder)} bytes"
        for e in prefix_entries(pkg)
        if e.mode == "binary" and len(e.placeholder) != BINARY_PLACEHOLDER_LENGTH
    ]


def _paths_matching(pkg: CondaArchive, test: Callable[[str], bool]) -> list[str]:
    return [m.name for m in pkg.files() if test(m.name)]


@package_check("C1134", "no pre/post-link or pre-unlink scripts")
def c1134(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(LINK_SCRIPTS))


@package_check("C1135", "no .egg files")
def c1135(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".egg"))


@package_check("C1136", "no easy_install scripts")
def c1136(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.startswith(("bin/easy_install", "Scripts/easy_install")))


@package_check("C1137", "no .pth files")
def c1137(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".pth"))


@package_check("C1138", "no .pyo files")
def c1138(pkg: CondaArchive) -> Outcome:
    if pkg.index.get("name") == "python":
        return "the python package may ship .pyo files"
    return _paths_matching(pkg, lambda p: p.endswith(".pyo"))


@package_check("C1139", ".pyc files only under site-packages")
def c1139(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: p.endswith(".pyc") and "site-packages" not in p and "distutils" not in p)


@package_check("C1140", "no lib2to3 .pickle files")
def c1140(pkg: CondaArchive) -> Outcome:
    return _paths_matching(pkg, lambda p: "lib2to3" in p and p.endswith(".pickle"))


@package_check("C1141", "every .py has a .pyc (Python 2 packages)")
def c1141(pkg: CondaArchive) -> Outcome:
    build = str(pkg.index.get("build", ""))
    if "py3" in build:
        return f"a Python 3 package (build '{build}'): .pyc files are made at install or import time"
    names = {m.name for m in pkg.files()}
    return [n for n in sorted(names) if "/site-packages/" in n and n.endswith(".py") and n + "c" not in names]


def _menus(pkg: CondaArchive) -> list[str]:
    return _paths_matching(pkg, lambda p: p.startswith("Menu/") and p.endswith(".json"))


@package_check("C1142", "Menu json is named after the package")
def c1142(pkg: CondaArchive) -> Outcome:
    menus = _menus(pkg)
    if len(menus) != 1:
        return "no single Menu json in the package"
    expected = f"Menu/{pkg.index.get('name')}.json"
    return [] if menus[0] == expected else [f"{menus[0]} should be {expected}"]


@package_check("C1143", "at most one Menu json")
def c1143(pkg: CondaArchive) -> Outcome:
    menus = _menus(pkg)
    return [", ".join(menus)] if len(menus) > 1 else []


@package_check("C1144", "Windows package arch is x86_64")
def c1144(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    arch = pkg.index.get("arch")
    expected = "x86_64" if pkg.subdir == "win-64" else "x86"
    return [] if arch == expected else [f"arch '{arch}' in a {pkg.subdir} package (expected {expected})"]


@package_check("C1145", "every .exe/.dll/.pyd is a PE for AMD64")
def c1145(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    expected = "AMD64" if pkg.subdir == "win-64" else "I386"
    problems: list[str] = []
    for member in pkg.files():
        if member.kind == "file" and member.name.lower().endswith(PE_SUFFIXES):
            if member.pe is None:
                problems.append(member.pe_problem)
            elif member.pe.machine != expected:
                problems.append(f"{member.name}: {member.pe.machine}")
    return problems


def _hash_and_size(pkg: CondaArchive) -> tuple[list[str], list[str], str]:
    paths, problem = paths_json(pkg)
    by_path = {str(p["_path"]): p for p in paths}
    sha_problems: list[str] = []
    size_problems: list[str] = []
    for member in pkg.files():
        entry = by_path.get(member.name)
        if member.kind != "file" or entry is None:
            continue  # links have no content; unlisted files are TB101's
        if entry.get("sha256") != member.sha256:
            sha_problems.append(
                f"{member.name}: {member.sha256[:12]}... in the archive, "
                f"{str(entry.get('sha256'))[:12]}... in paths.json"
            )
        if entry.get("size_in_bytes") != member.size:
            size_problems.append(f"{member.name}: {member.size} bytes, paths.json says {entry.get('size_in_bytes')}")
    return sha_problems, size_problems, problem


@package_check("C1146", "every file's sha256 matches info/paths.json")
def c1146(pkg: CondaArchive) -> Outcome:
    sha, _, problem = _hash_and_size(pkg)
    return [problem] if problem else sha


@package_check("C1147", "every file's size matches info/paths.json")
def c1147(pkg: CondaArchive) -> Outcome:
    _, size, problem = _hash_and_size(pkg)
    return [problem] if problem else size


@package_check("TB101", "info/paths.json lists exactly the payload")
def tb101(pkg: CondaArchive) -> Outcome:
    paths, problem = paths_json(pkg)
    if problem:
        return [problem]
    listed = Counter(str(p["_path"]) for p in paths)
    present = {m.name for m in pkg.files()}
    problems = [f"{p} is listed twice" for p, n in sorted(listed.items()) if n > 1]
    problems += [f"{p} is listed but not in the payload" for p in sorted(set(listed) - present)]
    problems += [f"{p} is in the payload but not listed" for p in sorted(present - set(listed))]
    return problems


def longest_windows_paths(pkg: CondaArchive) -> tuple[str, str]:
    """The longest installed path in a typical environment (the payload), and in the package cache
    (``pkgs/<dist>/``, where conda extracts the payload and info/ alike)."""
    payload = max((m.name for m in pkg.files()), key=len, default="")
    cached = max([payload, *(m.name for m in pkg.info_members if m.kind != "dir")], key=len)
    return CONDA_ENV + payload.replace("/", "\\"), CONDA_ROOT + "pkgs\\" + pkg.stem + "\\" + cached.replace("/", "\\")


def tb102_note(pkg: CondaArchive) -> str:
    in_env, in_cache = longest_windows_paths(pkg)
    spare = WIN_PATH_LIMIT - max(len(in_env), len(in_cache))
    return (
        f"longest path {len(in_env)} characters installed ({in_env.removeprefix(CONDA_ENV)}), {len(in_cache)} in "
        f"the package cache ({in_cache.removeprefix(CONDA_ROOT)}; limit {WIN_PATH_LIMIT}, {spare} to spare)"
    )


@package_check("TB102", "Windows install paths stay under MAX_PATH", note=tb102_note)
def tb102(pkg: CondaArchive) -> Outcome:
    if not pkg.is_windows:
        return f"not a Windows package ({pkg.subdir})"
    in_env, in_cache = longest_windows_paths(pkg)
    return [
        f"{where}: {len(path)} characters, over MAX_PATH ({WIN_PATH_LIMIT}): {path}"
        for where, path in (("installed", in_env), ("package cache", in_cache))
        if len(path) > WIN_PATH_LIMIT
    ]


@package_check("TB103", ".conda container layout (CEP 35)")
def tb103(pkg: CondaArchive) -> Outcome:
    if pkg.format != "conda":
        return "a .tar.bz2 has no outer container"
    expected = {"metadata.json", f"info-{pkg.stem}.tar.zst", f"pkg-{pkg.stem}.tar.zst"}
    names = [e.name for e in pkg.container]
    problems = [f"unexpected entry {n}" for n in names if n not in expected]
    problems += [f"missing {n}" for n in sorted(expected - set(names))]
    problems += [f"{e.name} is compressed (the outer zip must store)" for e in pkg.container if not e.stored]
    if pkg.metadata_json is not None:
        try:
            version = nesting.loads(pkg.metadata_json).get("conda_pkg_format_version")
        except (ValueError, AttributeError):
            version = None
        if version != 2:
            problems.append(f"metadata.json conda_pkg_format_version is {version!r}, not 2")
    return problems
