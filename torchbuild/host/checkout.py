"""The source of a compiled cell: a checkout given with ``--source-dir``, or a git ref cloned with its submodules
from ``--git-url`` (default upstream PyTorch) into the cache.

The source stage writes what it used into ``checkout.json`` (path, commit, a fingerprint of local changes): that
file is the stage's artifact, so a different checkout, commit or edit reruns the build.

Whether a directory is a PyTorch checkout is one separate step, ``validate_pytorch``; projects of another kind
(``RunOptions.source_kind = "project"``, used by the tests' fixture packages) skip it and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from torchbuild.config import nesting

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib
from torchbuild.config.options import DEFAULT_GIT_URL
from torchbuild.errors import UserError
from torchbuild.host import signals
from torchbuild.host.files import write_atomic

CLONE_TIMEOUT_S = 3600
FULL_SHA = re.compile(r"[0-9a-fA-F]{40}")
# A PyTorch checkout has these; submodules must be populated (an empty third_party/pybind11 means
# `git submodule update --init --recursive` was not run).
PYTORCH_MARKERS = ("setup.py", "version.txt", "torch/__init__.py", "aten/src/ATen", "c10")
PYTORCH_SUBMODULE_PROBES = ("third_party/pybind11/include", "third_party/fmt")


@dataclass(frozen=True)
class Checkout:
    path: str
    kind: str  # pytorch | project
    version: str  # version.txt of a PyTorch checkout ("" for other projects)
    commit: str  # git HEAD, or "" outside git
    fingerprint: str  # sha256 of the local changes, submodules' included (or of the file listing outside git)
    origin: str  # "--source-dir" or "<url>@<ref>"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> Checkout:
        return cls(**nesting.loads(path.read_text(encoding="utf-8")))


def validate_pytorch(path: Path, torch: str) -> str:
    """Refuse a directory that is not a PyTorch checkout of ``torch`` (X.Y.Z: a release, or the base of an own build's
    version: 2.16.0 of 2.16.0a0+git1eba9b3); return its version.txt."""
    absent = [m for m in PYTORCH_MARKERS if not (path / m).exists()]
    if absent:
        raise UserError(
            f"{path} is not a PyTorch checkout (no {', '.join(absent)}). Give the root of a clone of "
            f"{DEFAULT_GIT_URL} with --source-dir, or let the pipeline clone one with --git-ref v{torch}."
        )
    empty = [p for p in PYTORCH_SUBMODULE_PROBES if not (path / p).exists()]
    if empty:
        raise UserError(
            f"{path}: the submodules are not checked out ({', '.join(empty)} missing). Fix: "
            f"cd {path} && git submodule sync && git submodule update --init --recursive"
        )
    version = (path / "version.txt").read_text(encoding="utf-8").strip()
    base = re.match(r"\d+\.\d+\.\d+", version)
    if base is None or base.group(0) != torch:
        raise UserError(
            f"{path} is PyTorch {version} (version.txt), but this cell builds torch {torch}. Check out v{torch} "
            f"(git checkout v{torch} && git submodule update --init --recursive), or select the cell with "
            f"--torch {base.group(0) if base else version}."
        )
    return version


def _git(path: Path, *args: str) -> str | None:
    try:
        proc = signals.run(["git", "-C", str(path), *args], capture_output=True, text=True, errors="replace",
                           check=False)  # fmt: skip
    except FileNotFoundError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def head_commit(path: Path) -> str | None:
    """The commit a checkout's HEAD is at (40 hexadecimal digits), or None where ``path`` is no git checkout (or git
    is missing)."""
    head = (_git(path, "rev-parse", "HEAD") or "").strip()
    return head if re.fullmatch(r"[0-9a-f]{40}", head) else None


def _git_bytes(repo: Path, *args: str) -> bytes:
    """Output of a git command the fingerprint needs; a failure is a UserError naming the command."""
    argv = ["git", "-C", str(repo), *args]
    try:
        proc = signals.run(argv, capture_output=True, check=False)
    except OSError as exc:
        raise UserError(f"`{' '.join(argv)}` could not run ({exc}); the source fingerprint needs git.") from None
    if proc.returncode != 0:
        reason = (proc.stderr.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise UserError(
            f"`{' '.join(argv)}` failed (exit {proc.returncode}): {reason}. The source stage reads the checkout's "
            f"local changes with it; fix the repository at {repo} (or give a clean checkout with --source-dir)."
        )
    return bytes(proc.stdout)


def fingerprint(path: Path) -> tuple[str, str]:
    """(commit, fingerprint of the checkout's content beyond its commit).

    In git: HEAD, the diff of the tracked files against HEAD, the untracked files that are not ignored (names and
    contents), and the same for each populated submodule, recursively. Outside git: the listing of files with sizes
    and mtimes."""
    head = _git(path, "rev-parse", "HEAD")
    top = _git(path, "rev-parse", "--show-toplevel")
    if head is not None and top is not None and Path(top.strip()).resolve() == path.resolve():
        digest = hashlib.sha256()
        _hash_repo(path, "", digest.update)
        return head.strip(), digest.hexdigest()
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not _generated(p, path)):
        info = file.stat()
        digest.update(f"{file.relative_to(path).as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return "", digest.hexdigest()


def _hash_repo(repo: Path, prefix: str, update: Callable[[bytes], object]) -> None:
    head = _git_bytes(repo, "rev-parse", "HEAD").strip()
    update(b"repo " + prefix.encode() + b"\0" + head + b"\n")
    # Plain-text, binary-safe diff whatever the user's diff configuration (external tools, textconv, colour).
    diff = _git_bytes(repo, "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--binary", "HEAD")
    update(b"diff %d\n" % len(diff) + diff)
    untracked = _git_bytes(repo, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0")
    for name in sorted(n for n in untracked if n):
        file = repo / os.fsdecode(name).rstrip("/")
        if _generated(file, repo):
            continue
        update(b"untracked " + name + b"\0" + _content(file).encode() + b"\n")
    # Index entries of mode 160000 are submodules: "<mode> <object> <stage>\t<path>".
    for entry in _git_bytes(repo, "ls-files", "--stage", "-z").split(b"\0"):
        if not entry.startswith(b"160000 "):
            continue
        sub = os.fsdecode(entry.split(b"\t", 1)[1])
        if (repo / sub / ".git").exists():
            _hash_repo(repo / sub, f"{prefix}{sub}/", update)
        else:
            update(f"unpopulated {prefix}{sub}\n".encode())


def _content(file: Path) -> str:
    try:
        if file.is_symlink():
            return "link:" + os.readlink(file)
        if file.is_dir():  # an untracked repository inside the checkout
            return "dir:" + fingerprint(file)[1]
        sha = hashlib.sha256()
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
        return "file:" + sha.hexdigest()
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def _generated(file: Path, root: Path) -> bool:
    parts = file.relative_to(root).parts
    return bool(parts) and (parts[0] in ("build", "dist", ".git") or parts[0].endswith(".egg-info"))


def describe(path: Path, kind: str, torch: str, origin: str) -> Checkout:
    path = path.resolve()
    if not path.is_dir():
        raise UserError(f"--source-dir {path}: no such directory.")
    version = validate_pytorch(path, torch) if kind == "pytorch" else ""
    commit, changes = fingerprint(path)
    return Checkout(path=str(path), kind=kind, version=version, commit=commit, fingerprint=changes, origin=origin)


def build_requires(path: Path) -> list[str]:
    """What a project's pyproject.toml says its build needs (``[build-system] requires``); setuptools and wheel, the
    default PEP 518 gives, where it has no pyproject.toml or says nothing."""
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        return ["setuptools>=40.8.0", "wheel"]
    try:
        raw = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{pyproject}: not valid TOML ({exc}): fix it, or give another checkout.") from None
    requires = raw.get("build-system", {}).get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        return ["setuptools>=40.8.0", "wheel"]
    return list(requires)


@dataclass(frozen=True)
class Clone:
    path: Path
    commit: str  # the commit the ref resolved to


def clone(url: str, ref: str, cache_dir: Path, log: Path) -> Clone:
    """A shallow checkout of ``ref`` (tag, branch or full commit SHA) with its submodules, kept in
    ``<cache>/src/<name>-<ref>``. A complete clone of a full SHA is reused as is; any other ref is fetched again
    (a branch moves; cheap when it has not). Git's output goes to ``log``."""
    for option, value in (("--git-url", url), ("--git-ref", ref)):
        if not value or value.startswith("-"):  # git would read it as one of its own options
            raise UserError(f"{option} {value!r}: give a repository URL and a tag, branch or full commit SHA.")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
    pinned = FULL_SHA.fullmatch(ref) is not None
    if pinned:
        ref = ref.lower()
    dest = cache_dir / "src" / f"{name}-{re.sub(r'[^A-Za-z0-9._-]', '_', ref)}"
    done = dest / ".git" / "torchbuild-clone-complete"
    git = _CloneGit(dest, url, ref, log)
    if done.is_file() and pinned and _git(dest, "rev-parse", "HEAD") == ref + "\n":
        return Clone(dest, ref)
    if done.is_file():
        done.unlink()  # an update stopped half-way leaves no marker, and the next run starts afresh
        git("remote", "set-url", "origin", url)
    else:
        if dest.exists() or dest.is_symlink():
            remove_tree(dest)
        try:
            dest.mkdir(parents=True)
        except OSError as exc:
            raise UserError(f"cannot create {dest} for the clone of {url} {ref}: {exc}. Check --cache-dir.") from None
        git("init")
        git("remote", "add", "origin", url)
    # --no-recurse-submodules: git would otherwise fetch the full history of changed submodules.
    git("fetch", "--depth", "1", "--no-recurse-submodules", "origin", ref)
    git("checkout", "--force", "--detach", "FETCH_HEAD")
    git("submodule", "update", "--init", "--recursive", "--force", "--depth", "1", "--jobs", "4")
    commit = git("rev-parse", "HEAD").strip()
    write_atomic(done, f"{ref}\n{commit}\n")
    return Clone(dest, commit)


@dataclass(frozen=True)
class _CloneGit:
    """Runs git in the clone; output goes to the log, and a failure is a UserError naming the command, URL and ref."""

    dest: Path
    url: str
    ref: str
    log: Path

    def __call__(self, *args: str) -> str:
        argv = ["git", "-C", str(self.dest), *args]
        shown = f"`git {' '.join(args)}` (in {self.dest}, for --git-url {self.url} --git-ref {self.ref})"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        try:
            proc = signals.run(
                argv, capture_output=True, text=True, errors="replace", timeout=CLONE_TIMEOUT_S, check=False
            )
        except FileNotFoundError:
            raise UserError("git is not on PATH: install git to build from --git-ref, or give --source-dir.") from None
        except subprocess.TimeoutExpired:
            raise UserError(
                f"{shown} took longer than {CLONE_TIMEOUT_S} s. Check the network, or clone the ref yourself and "
                f"give --source-dir."
            ) from None
        except OSError as exc:
            raise UserError(f"{shown} could not run: {exc}") from None
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n[exit {proc.returncode}]\n")
        if proc.returncode != 0:
            reason = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UserError(
                f"{shown} failed (exit {proc.returncode}): {reason}. {_HINTS.get(args[0], '')}Full log: {self.log}"
            )
        return str(proc.stdout)


_HINTS = {
    "fetch": "Check --git-url and the ref: a tag (v2.5.1), a branch, or a full 40-character commit SHA (a short "
    "SHA cannot be fetched). ",
    "submodule": "The ref's submodules could not be fetched: check the network and the URLs in its .gitmodules. ",
}


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything in it, read-only files too (git's pack and index files are read-only, which
    stops a plain rmtree on Windows)."""

    def writable_then_retry(func: Callable[..., object], name: str, exc: BaseException) -> None:
        if func not in (os.unlink, os.remove, os.rmdir) or not isinstance(exc, PermissionError):
            raise exc
        os.chmod(name, stat.S_IWRITE | stat.S_IREAD | (stat.S_IEXEC if os.path.isdir(name) else 0))
        parent = os.path.dirname(name)  # on POSIX, what guards unlink is the folder's write bit
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)
        func(name)

    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        elif sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=writable_then_retry)
        else:
            shutil.rmtree(path, onerror=lambda func, name, info: writable_then_retry(func, name, info[1]))
    except OSError as exc:
        raise UserError(
            f"cannot delete the incomplete clone {path}: {exc}. Close what uses files in it (an editor, a shell, a "
            f"build), delete the folder yourself, and run again."
        ) from None


def write(checkout: Checkout, path: Path) -> None:
    write_atomic(path, checkout.to_json())
