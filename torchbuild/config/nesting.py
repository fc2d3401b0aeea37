"""A depth limit for every structured file torchbuild reads back (report.json, state.json, an SBOM, a channel's
repodata.json, a package's index.json; matrix.yaml): real ones nest a few levels, and a hostile or broken one nested
thousands deep would end in a RecursionError traceback, in the parser or in whatever walks the result."""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.nodes import Node

MAX_DEPTH = 64  # CycloneDX SBOMs, repodata.json and the run's reports nest at most about 8 levels


class NestedTooDeep(json.JSONDecodeError):
    """A JSON document nested deeper than MAX_DEPTH: a JSONDecodeError, as for any text that is not JSON."""

    def __str__(self) -> str:
        return self.msg  # no "line 1 column 1": the whole document is refused


def _too_deep(text: str | bytes) -> NestedTooDeep:
    document = text if isinstance(text, str) else text.decode("utf-8", "replace")
    return NestedTooDeep(f"nested deeper than {MAX_DEPTH} levels", document, 0)


def _depth_over_limit(value: object) -> bool:
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_DEPTH:
                    return True
                pending.append((child, depth + 1))
    return False


def loads(text: str | bytes) -> Any:
    """``json.loads``; NestedTooDeep when the document nests deeper than MAX_DEPTH."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(text) from None
    if _depth_over_limit(value):
        raise _too_deep(text)
    return value


class DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document that nests deeper than MAX_DEPTH (a ComposerError with its line)."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
