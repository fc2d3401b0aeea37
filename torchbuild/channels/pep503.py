"""PEP 503 "simple" pages for the wheels of a channel: render them, and read back the links of a page we wrote.

Pages are merged, never rebuilt from scratch: a publisher adds its links to the ones already on the page, so two
publishers (or a page and a listing that disagree) never drop a wheel.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

# href="torch-2.5.1%2Bcpu-...whl#sha256=<hex>" (S3 reads a raw '+' in a path as a space, hence the quoting).
_WHEEL_LINK = re.compile(r'href="([^"#]+\.whl)#sha256=([0-9a-f]{64})"')
_PROJECT_LINK = re.compile(r'href="([^"/]+)/"')
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(text: str) -> bool:
    """64 lowercase hex digits: the only text a page's #sha256= may carry."""
    return _SHA256.fullmatch(text) is not None


def project_page(project: str, wheels: Mapping[str, str]) -> str:
    """The page of one project: a link per wheel file name, with its sha256."""
    bad = sorted(name for name, digest in wheels.items() if not is_sha256(digest))
    if bad:
        raise ValueError(f"not a sha256 for {', '.join(bad)}: a page links a wheel by its own hash only")
    links = [
        f'    <a href="{quote(name)}#sha256={digest}">{html.escape(name)}</a><br/>'
        for name, digest in sorted(wheels.items())
    ]
    return _page(f"Links for {html.escape(project)}", links)


def root_page(projects: Iterable[str]) -> str:
    links = [f'    <a href="{quote(p)}/">{html.escape(p)}</a><br/>' for p in sorted(set(projects))]
    return _page("Simple index", links)


def wheel_links(page: str) -> dict[str, str]:
    """File name -> sha256 of every wheel link on a project page."""
    return {unquote(href): digest for href, digest in _WHEEL_LINK.findall(page)}


def project_links(page: str) -> set[str]:
    return {unquote(href) for href in _PROJECT_LINK.findall(page)}


def _page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (
        '<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{title}</title></head>\n  <body>\n    <h1>{title}</h1>\n{body}\n  </body>\n</html>\n"
    )
