"""What a local channel's records of a wheel say: its sidecar and its PEP 503 page (a subdir's repodata.json is read by
repodata.py); and staging a text file only where it changes (local.py trusts these records only as its docstring
says)."""

from __future__ import annotations

from pathlib import Path

from torchbuild.channels import pep503
from torchbuild.host.files import Staged


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


def stage_if_changed(staged: Staged, path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    staged.write_text(path, text)
