"""What a local channel's records say: a subdir's repodata.json, a wheel's sidecar and its PEP 503 page; and staging
a text file only where it changes (local.py trusts these records only as its docstring says)."""

from __future__ import annotations

import sys
from pathlib import Path

from torchbuild.channels import pep503
from torchbuild.config import nesting
from torchbuild.host.files import Staged

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd


def recorded(repodata: Path) -> dict[str, dict[str, object]]:
    """The records of a subdir's repodata.json by file name; empty when it is missing or unreadable."""
    try:
        raw = nesting.loads(repodata.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    records: dict[str, dict[str, object]] = {}
    for key in ("packages", "packages.conda"):
        section = raw.get(key)
        if isinstance(section, dict):
            records.update({str(n): r for n, r in section.items() if isinstance(r, dict)})
    return records


def page_link(wheel: Path) -> str:
    """The sha256 the wheel's project page links it with; "" when it does not."""
    try:
        page = (wheel.parent / "index.html").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    return pep503.wheel_links(page).get(wheel.name, "")


def read_sidecar(sidecar: Path) -> str:
    """The sha256 a wheel's sidecar records; "" when it is missing or holds anything but one."""
    try:
        text = sidecar.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return text if pep503.is_sha256(text) else ""


def index_whole(subdir: Path) -> bool:
    """The subdir's repodata.json is a JSON object and its repodata.json.zst (what conda clients fetch first) holds
    the same bytes."""
    try:
        plain = (subdir / "repodata.json").read_bytes()
        packed = zstd.decompress((subdir / "repodata.json.zst").read_bytes())
        return packed == plain and isinstance(nesting.loads(plain), dict)
    except (OSError, ValueError, zstd.ZstdError):
        return False


def stage_if_changed(staged: Staged, path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    staged.write_text(path, text)


def same_index(made: Path, current: Path) -> bool:
    """The subdir index at ``made`` says what the whole one at ``current`` says, apart from when its records were
    indexed (py-rattler stamps each record with ``indexed_timestamp``): the current one is left as it is."""
    if not index_whole(current.parent):
        return False
    try:
        return _without_stamps(nesting.loads(made.read_bytes())) == _without_stamps(nesting.loads(current.read_bytes()))
    except (OSError, ValueError):
        return False


def _without_stamps(repodata: object) -> object:
    if not isinstance(repodata, dict):
        return repodata
    trimmed = dict(repodata)
    for key in ("packages", "packages.conda"):
        section = trimmed.get(key)
        if isinstance(section, dict):
            trimmed[key] = {name: {k: v for k, v in record.items() if k != "indexed_timestamp"}
                            if isinstance(record, dict) else record for name, record in section.items()}  # fmt: skip
    return trimmed
