"""matrix.yaml's nodes read with their line numbers: the scalars, lists, numbers and mappings of config/matrix.py,
each refused with one line naming the key, the line and an example of a valid value."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

import yaml

from torchbuild.config.matrix_schema import EXAMPLES, FLOAT_RANGES, MAX_INT, MIN_INT
from torchbuild.errors import UserError, one_of
from torchbuild.knowledge.compat import PLATFORMS


class MatrixError(UserError):
    pass


def where(path: str, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def unknown_key(path: str, node: yaml.Node, key: str, valid: list[str] | tuple[str, ...]) -> MatrixError:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return MatrixError(f"{where(path, node)}: unknown key '{key}'.{hint} Valid keys: {one_of(valid)}.")


def example(key: str) -> str:
    return f", e.g. {EXAMPLES[key]}" if key in EXAMPLES else ""


def scalar(path: str, key: str, node: yaml.Node, what: str | None = None) -> str:
    what = what or f"'{key}'"
    if not isinstance(node, yaml.ScalarNode):
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
        raise MatrixError(f"{where(path, node)}: {what} must be a single value, not {kind}{example(key)}.")
    if node.value == "" or node.tag == "tag:yaml.org,2002:null":
        raise MatrixError(f"{where(path, node)}: {what} is empty{example(key)}.")
    return str(node.value)


def sequence(path: str, key: str, node: yaml.Node) -> tuple[str, ...]:
    if isinstance(node, yaml.ScalarNode) and node.value == "":
        raise MatrixError(f"{where(path, node)}: '{key}' is empty; give a list{example(key)}.")
    if isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null":
        raise MatrixError(f"{where(path, node)}: '{key}' must be a list, e.g. {key}: [{node.value}].")
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise MatrixError(f"{where(path, node)}: '{key}' is an empty list; give at least one value{example(key)}.")
    values: dict[str, yaml.Node] = {}
    for item in node.value:
        value = scalar(path, key, item, f"each '{key}' entry")
        if key == "platforms":
            platform_value(path, item, value)
        first = values.setdefault(value, item)
        if first is not item:
            raise MatrixError(
                f"{where(path, item)}: '{key}' lists '{value}' twice (lines {first.start_mark.line + 1} and "
                f"{item.start_mark.line + 1}); keep one, or every cell with it is built twice."
            )
    return tuple(values)


def integer(path: str, key: str, node: yaml.Node) -> int:
    text = scalar(path, key, node)
    try:
        value = int(text)
    except ValueError:
        raise MatrixError(f"{where(path, node)}: '{key}' must be an integer, not '{text}'{example(key)}.") from None
    least = MIN_INT.get(key, 0)
    if not least <= value <= MAX_INT:
        raise MatrixError(f"{where(path, node)}: '{key}' must be from {least} to {MAX_INT}, not {text}"
                          f"{example(key)}.")  # fmt: skip
    return value


def number(path: str, key: str, node: yaml.Node) -> float:
    text = scalar(path, key, node)
    try:
        value = float(text)
    except ValueError:
        raise MatrixError(f"{where(path, node)}: '{key}' must be a number, not '{text}'{example(key)}.") from None
    low, high = FLOAT_RANGES[key]
    if not low < value <= high:  # also refuses nan and inf
        raise MatrixError(
            f"{where(path, node)}: '{key}' must be more than {low:g} and at most {high:g}, not {text}{example(key)}."
        )
    return value


def pairs(path: str, key: str, node: yaml.Node) -> Iterator[tuple[yaml.ScalarNode, yaml.Node]]:
    """A mapping's (key, value) nodes; a key given twice is an error (YAML loaders keep the last, silently)."""
    if not isinstance(node, yaml.MappingNode):
        raise MatrixError(f"{where(path, node)}: '{key}' must be a mapping of key: value{example(key)}.")
    seen: dict[str, yaml.Node] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise MatrixError(f"{where(path, key_node)}: a key of '{key}' must be a plain name{example(key)}.")
        first = seen.setdefault(key_node.value, key_node)
        if first is not key_node:
            raise MatrixError(
                f"{where(path, key_node)}: '{key_node.value}' is given twice, on line {first.start_mark.line + 1} "
                f"and on line {key_node.start_mark.line + 1}; keep one (YAML would silently use the last)."
            )
    yield from node.value

def platform_value(path: str, node: yaml.Node, value: str) -> None:
    if value not in PLATFORMS:
        raise MatrixError(f"{where(path, node)}: unknown platform '{value}'; valid platforms: {one_of(PLATFORMS)}.")
