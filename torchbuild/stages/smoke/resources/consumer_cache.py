"""The C++ consumer's compile once per content, its link and run in every environment.

Compiling consumer.cpp against ATen's headers is most of the consumer check's time, and what it compiles is
decided by what the environment holds: torch's include/ and share/cmake/ (TorchConfig.cmake and what it reads), the
project, the compiler and cmake. Those are hashed (the files' bytes, not their names or dates); an environment whose
hash was compiled before copies that object and links it against its own torch/lib and runs it, so a header or a
cmake file of another content (a broken package) compiles afresh and fails as before, and a missing or broken
library fails the link or the run, which stay per environment. The folder is shared through SHARED_ENV; where it is
not set (a user's own run, Windows) every environment compiles. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import digests

SHARED_ENV = "TORCHBUILD_SMOKE_SHARED"
HASHED = ("include", "share/cmake")  # what of torch's folder the compile reads
OBJECT = "consumer.o"
LINK = "link.json"
PLACEHOLDER = "@TORCH_FOLDER@"


def shared_dir() -> Path | None:
    raw = os.environ.get(SHARED_ENV)
    return Path(raw) if raw else None


def content_key(folder: Path, inputs: Sequence[str]) -> str:
    """sha256 over ``inputs`` (the project's text, the tools' versions, the flags) and every file under torch's
    HASHED folders, by relative path and bytes."""
    digest = hashlib.sha256()
    for text in inputs:
        digest.update(text.encode() + b"\0")
    for top in HASHED:
        for relative, file_digest in digests.tree(folder / top):
            digest.update(f"{top}/{relative}".encode() + b"\0")
            digest.update(file_digest)
    return digest.hexdigest()


def cached_link(shared: Path, key: str, folder: Path, build: Path) -> list[list[str]] | None:
    """The object compiled for ``key`` put into ``build`` where cmake would have made it; returns the commands that
    link it (each an argv, run in ``build``) against this environment's torch ``folder``; None where nothing is
    cached."""
    entry = shared / key
    try:
        spec = json.loads((entry / LINK).read_text(encoding="utf-8"))
        target = build / spec["object"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry / OBJECT, target)
        words = shlex.split(str(spec["command"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # The folder goes into words, not into the shell line: a folder with a space (a profile's "Zoë Ng") would split
    # where the line has it bare, and keep quotes where cmake put it in double quotes.
    commands: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word.replace(PLACEHOLDER, str(folder)))
    return [argv for argv in commands if argv and argv != [":"]]


def store(shared: Path, key: str, folder: Path, build: Path) -> None:
    """The object cmake compiled in ``build`` and its link command with ``folder`` left open, kept for ``key``
    (after the consumer built and ran), where ``shared`` can be written. Nothing is kept where the link line names
    this environment other than through ``folder`` (it could not be moved to another)."""
    command = _link_command(build)
    objects = sorted(build.rglob("consumer.cpp.o"))
    if command is None or len(objects) != 1 or str(folder) not in command:
        return
    template = command.replace(str(folder), PLACEHOLDER)
    if str(folder.parent) in template:
        return
    spec = {"command": template, "object": objects[0].relative_to(build).as_posix()}
    made = None
    try:
        shared.mkdir(parents=True, exist_ok=True)
        made = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=shared))
        shutil.copyfile(objects[0], made / OBJECT)
        (made / LINK).write_text(json.dumps(spec), encoding="utf-8")
        os.replace(made, shared / key)
    except OSError:  # another environment kept the same content first, or a folder that cannot be written
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _link_command(build: Path) -> str | None:
    """The command that links the consumer: Makefiles keep it in link.txt; Ninja prints it last of the commands
    that make the target."""
    link_txt = build / "CMakeFiles" / "consumer.dir" / "link.txt"
    if link_txt.is_file():
        return " && ".join(line for line in link_txt.read_text(encoding="utf-8").splitlines() if line.strip())
    ninja = shutil.which("ninja")
    if ninja is None or not (build / "build.ninja").is_file():
        return None
    proc = subprocess.run([ninja, "-C", str(build), "-t", "commands", "consumer"], capture_output=True, text=True,
                          errors="replace", check=False)  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else None
