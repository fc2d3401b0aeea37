"""A fast verdict on whether a Linux wheel already satisfies its manylinux policy, from auditwheel's policy data.

auditwheel's full analysis (what ``auditwheel show`` and ``repair`` run) walks every library each extension loads,
system ones included: 50 s for the torch wheel, to conclude "nothing to vendor". When the import closure is complete
(elf.py: every DT_NEEDED is in the wheel or on the policy's whitelist) and, read from the wheel's own ELF files, no
versioned symbol is newer than the policy allows, no instruction set is beyond its architecture, no blacklisted
symbol of an allowed library is used and no extension references PyFPE_jbuf, the wheel is already compliant: that
is auditwheel's own verdict, reached without loading the system's libraries. Anything else is left to auditwheel.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchbuild.host import archives
from torchbuild.host.files import write_atomic
from torchbuild.knowledge.cache_folder import user_cache_dir
from torchbuild.platforms.closure import ClosureReport
from torchbuild.platforms.linux import auditwheel_api, elf

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

EXTENSION_SUFFIXES = (".abi3.so",)


@dataclass(frozen=True)
class Verdict:
    compliant: bool
    reason: str  # why not, or what was checked


def _is_extension(name: str) -> bool:
    base = Path(name).name
    return ".cpython-" in base or base.endswith(EXTENSION_SUFFIXES)


def _blacklisted(handle: ELFFile, needed: tuple[str, ...], blacklist: Mapping[str, frozenset[str]]) -> list[str]:
    from elftools.elf.sections import SymbolTableSection

    wanted = frozenset().union(*(blacklist[lib] for lib in needed if lib in blacklist))
    if not wanted:
        return []
    section = handle.get_section_by_name(".dynsym")
    if not isinstance(section, SymbolTableSection):
        return []
    return sorted(
        sym.name for sym in section.iter_symbols() if sym["st_shndx"] == "SHN_UNDEF" and sym.name in wanted
    )


def verdict(
    wheel: Path,
    platform_tag: str,
    closure: ClosureReport[elf.ElfInfo],
    scratch: Path | None = None,
    kept: Path | None = None,
) -> Verdict:
    """Whether ``wheel`` (with ``closure``, its elf.check_wheel report) already satisfies ``platform_tag``.
    ``kept``: where elf.check_wheel kept the ELF members (``keep_in``); otherwise each is copied out again."""
    from elftools.elf.elffile import ELFFile  # pyelftools loads in 50 ms: only where ELF is read

    if not closure.ok:  # executables' gaps do not count: auditwheel grafts only for what extensions load
        return Verdict(False, "the import closure is not complete inside the wheel and the policy's libraries")
    policies, policy = elf.manylinux_policies(platform_tag)
    allowed = {name: {f"{name}_{v}" for v in versions} for name, versions in policy.symbol_versions.items()}
    blacklist = {lib: frozenset(symbols) for lib, symbols in policy.blacklist.items()}
    by_path = {e.path: e for e in closure.files}
    problems: list[str] = []
    with archives.open_zip(wheel) as archive, tempfile.TemporaryDirectory(dir=scratch, prefix="manylinux-") as tmp:
        for name, info in sorted(by_path.items()):
            copy = Path(tmp) / "member" if kept is None else elf.kept_path(kept, name)
            if kept is None:
                with archive.open(name) as src, copy.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            try:
                with copy.open("rb") as handle:
                    parsed = ELFFile(handle)
                    for _lib, version in auditwheel_api.versioned_symbols(parsed):
                        family = version.partition("_")[0]
                        if family in allowed and version not in allowed[family]:
                            problems.append(f"{name} needs {version}, newer than {policy.name} allows")
                    try:
                        extended = auditwheel_api.extended_architecture(parsed)  # raises on an unknown ISA
                    except ValueError as exc:
                        problems.append(f"{name}: {exc}")
                        extended = None
                    if extended is not None and not policies.architecture.is_superset(extended):
                        problems.append(f"{name} needs the {extended.value} instruction set")
                    problems += [f"{name} uses {s}, blacklisted in {policy.name}" for s in
                                 _blacklisted(parsed, info.needed, blacklist)]  # fmt: skip
                    if _is_extension(name) and auditwheel_api.references_pyfpe_jbuf(parsed):
                        problems.append(f"{name} references PyFPE_jbuf")
            except (elf.elf_error(), ValueError, OSError) as exc:
                problems.append(f"{name} cannot be read: {exc}")
            if problems:
                break  # one reason is enough: auditwheel decides the rest
    if problems:
        return Verdict(False, problems[0])
    checked = f"{len(by_path)} ELF files: symbol versions, instruction sets and symbols within {policy.name}"
    return Verdict(True, checked)


def accepted_platform_tags(target: str) -> tuple[str, ...]:
    """Platform tags of an input wheel that can become a wheel tagged ``target``, most preferred first.

    For a manylinux target: the target and every older manylinux policy (and their legacy aliases) from auditwheel's
    policy data, then the unrepaired ``linux_<arch>`` of a local build. Anything else: the target tag only.

    The pin step asks this on every run, and auditwheel takes 90 ms to import, so the answer is kept in the user's
    cache, named by the target and the digest of the auditwheel files the policies come from and of the code here
    (``_kept_answer``): another auditwheel, an edited one or another torchbuild is asked again.
    """
    if not target.startswith("manylinux"):
        return (target,)
    kept = _kept_answer(target)
    try:
        found = json.loads(kept.read_text(encoding="utf-8")) if kept else None
        if isinstance(found, list) and found and all(isinstance(tag, str) for tag in found):
            return tuple(found)
    except (OSError, ValueError):
        pass  # none kept yet, or a damaged entry: asked again and replaced
    tags = _from_policies(target)
    if kept is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(kept, json.dumps(tags))
        except OSError:
            pass  # a cache that cannot be written costs time only
    return tags


def _kept_answer(target: str) -> Path | None:
    """Where the answer for ``target`` is kept: named by the digest of auditwheel's policy files and of the code
    here that reads them (this module and elf.py), so that a change to either asks auditwheel again."""
    sources = auditwheel_api.policy_sources_digest()
    try:
        ours = b"".join(Path(module).read_bytes() for module in (__file__, elf.__file__))
    except OSError:
        ours = b""
    if sources is None or not ours:
        return None
    digest = hashlib.sha256(sources.encode() + ours).hexdigest()
    return user_cache_dir() / "platform-tags" / f"{target}-{digest}.json"


def _from_policies(target: str) -> tuple[str, ...]:
    policies, wanted = elf.manylinux_policies(target)
    older = sorted((p for p in policies if p.name != policies.linux.name and not p < wanted), key=lambda p: p.priority)
    tags = [str(name) for p in older for name in (p.name, *p.aliases)]
    return (*tags, str(policies.linux.name))
