"""What an options dataclass says of one of its fields: its default, its type and, for a Literal field, its choices.
The CLI's defaults, choices and help and matrix.yaml's validation read them here, so that the dataclasses
(config/options.py) are the one place each option's choices and default are written."""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints


def _field(cls: type, name: str) -> dataclasses.Field[Any]:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def default(cls: type, name: str) -> Any:
    """The default of ``cls``'s field ``name``; a default_factory is called now (e.g. the user's cache folder)."""
    found = _field(cls, name)
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    if found.default is dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{name} has no default")
    return found.default


def type_of(cls: type, name: str) -> Any:
    """The type of ``cls``'s field ``name``, its annotation evaluated."""
    _field(cls, name)  # a name that is not a field is a bug here, not a missing hint
    return get_type_hints(cls)[name]


def literal_choices(hint: Any) -> tuple[str, ...]:
    """The values of a Literal type, also inside ``Literal[...] | None``; () for any other type."""
    if get_origin(hint) is Literal:
        return tuple(get_args(hint))
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(value for arm in get_args(hint) for value in literal_choices(arm))
    return ()


def choices(cls: type, name: str) -> tuple[str, ...]:
    """The choices of ``cls``'s Literal field ``name``, in the order the type writes them."""
    found = literal_choices(type_of(cls, name))
    if not found:
        raise TypeError(f"{cls.__name__}.{name} is not a Literal field")
    return found
