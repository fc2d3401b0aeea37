"""The source of a compiled cell: a checkout given with ``--source-dir``, or a git ref cloned with its submodules
from ``--git-url`` (default upstream PyTorch) into the cache.

The source stage writes what it used to ``checkout.json`` (path, commit, a fingerprint of local changes): that
file is the stage's artifact, so a different checkout, commit or edit reruns the build.

Whether a directory is a PyTorch checkout is one separate step, ``validate_pytorch``; projects of another kind
(``RunOptions.source_kind = "project"``, used by the tests' fixture packages) skip it and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from torchbuild.errors import UserError
from torchbuild.files import write_atomic
from torchbuild.stages import Artifact, Context, StageResult

DEFAULT_GIT_URL = "https://github.com/pytorch/pytorch"
CLONE_TIMEOUT_S = 3600
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
    fingerprint: str  # sha256 of `git status --porcelain` (or of the file listing outside git)
    origin: str  # "--source-dir" or "<url>@<ref>"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> Checkout:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def validate_pytorch(path: Path, torch: str) -> str:
    """Refuse a directory that is not a PyTorch checkout of release ``torch``; return its version.txt."""
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
        proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def fingerprint(path: Path) -> tuple[str, str]:
    """(commit, fingerprint of local changes). Outside git: the listing of files with sizes and mtimes."""
    head = _git(path, "rev-parse", "HEAD")
    top = _git(path, "rev-parse", "--show-toplevel")
    if head is not None and top is not None and Path(top.strip()).resolve() == path.resolve():
        status = _git(path, "status", "--porcelain", "--untracked-files=no") or ""
        return head.strip(), hashlib.sha256(status.encode()).hexdigest()
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not _generated(p, path)):
        info = file.stat()
        digest.update(f"{file.relative_to(path).as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return "", digest.hexdigest()


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


def clone(url: str, ref: str, cache_dir: Path, log: Path) -> Path:
    """A shallow clone of ``ref`` (tag or branch) with its submodules, kept in ``<cache>/src/<name>-<ref>``; a
    complete earlier clone is reused. Output goes to ``log``."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
    dest = cache_dir / "src" / f"{name}-{re.sub(r'[^A-Za-z0-9._-]', '_', ref)}"
    done = dest / ".torchbuild-clone-complete"
    if done.is_file():
        return dest
    if dest.exists():
        import shutil

        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        "git", "clone", "--depth", "1", "--branch", ref, "--recurse-submodules", "--shallow-submodules",
        "--jobs", "4", url, str(dest),
    ]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=CLONE_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError("git is not on PATH: install git to build from --git-ref, or give --source-dir.") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"git clone of {url} {ref} took longer than {CLONE_TIMEOUT_S} s; see {log}") from None
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(
            f"git clone --branch {ref} {url} failed: {reason}. Check the ref (a tag such as v2.5.1, or a branch) "
            f"and --git-url. Full log: {log}"
        )
    write_atomic(done, ref + "\n")
    return dest


def write(checkout: Checkout, path: Path) -> None:
    write_atomic(path, checkout.to_json())


def source_stage(ctx: Context) -> StageResult:
    """The source stage in compile mode: the checkout (given or cloned), validated, described in checkout.json."""
    options = ctx.options
    stage_dir = ctx.stage_dir("source")
    if options.source_dir is not None:
        path, origin = options.source_dir, "--source-dir"
    else:
        assert options.git_ref is not None
        path = clone(options.git_url, options.git_ref, options.cache_dir, ctx.stage_dir("logs") / "source.log")
        origin = f"{options.git_url}@{options.git_ref}"
    found = describe(path, options.source_kind, ctx.plan.torch, origin)
    manifest = stage_dir / "checkout.json"
    write(found, manifest)
    what = f"PyTorch {found.version}" if found.kind == "pytorch" else f"{found.kind} (not checked as PyTorch)"
    commit = f" at {found.commit[:12]}" if found.commit else ""
    return StageResult(outputs={"checkout": Artifact.of(manifest)}, message=f"{what}{commit}: {found.path} ({origin})")
