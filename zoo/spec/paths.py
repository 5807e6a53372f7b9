"""Dotted paths into spec data and into the schema: ``model.depth``, ``inference.mfvi.steps``.

:func:`set_path` writes into plain spec data (dicts and lists, before validation); the other
functions walk the schema from a root section class (the :class:`~zoo.spec.schema.Spec`) to
say which fields may stand at a path, for sweep axes and did-you-mean suggestions.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from zoo.spec.base import kind_of, union_members

__all__ = [
    "fields_at",
    "homes",
    "models_at",
    "parse_path",
    "path_in_schema",
    "set_path",
    "suggest_path",
]


def _list_index(items: list[Any], part: str) -> int | None:
    """Index of ``part`` in a list: a number, or the ``name`` of an element (a method)."""
    if part.lstrip("-").isdigit() and -len(items) <= int(part) < len(items):
        return int(part)
    names = [x.get("name") if isinstance(x, dict) else None for x in items]
    return names.index(part) if part in names else None


def set_path(d: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``value`` at a dotted path, creating mappings on the way.

    List elements are addressed by index or, for lists of named entries such as
    ``inference``, by name: ``inference.0.steps`` or ``inference.mfvi.steps``.

    Raises
    ------
    KeyError
        If a list has no element of that index or name.
    """
    node: Any = d
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            k = _list_index(node, p)
            if k is None:
                raise KeyError(
                    f"{'.'.join(parts[: i + 1])}: no list element {p!r} (give an "
                    f"index 0..{len(node) - 1} or a name)"
                )
            if last:
                node[k] = value
            else:
                node = node[k]
            continue
        if last:
            node[p] = value
        else:
            if not isinstance(node.get(p), dict | list):
                node[p] = {}
            node = node[p]


def parse_path(text: str) -> list[Any]:
    """``"inference[1].guide.rank"`` (or ``inference.1.guide.rank``) as ``["inference", 1,
    "guide", "rank"]``."""
    out: list[Any] = []
    for part in text.replace("[", ".").replace("]", "").split("."):
        out.append(int(part) if part.isdigit() else part)
    return out


def models_at(root: type[BaseModel], path: Sequence[Any]) -> tuple[list[type[BaseModel]], str]:
    """The section classes that may stand at a (tag-free) path, and its field description.

    List indices in ``path`` are skipped; a union field yields all its member classes.
    """
    models: list[type[BaseModel]] = [root]
    desc = ""
    for p in path:
        if isinstance(p, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            if p in m.model_fields:
                desc = m.model_fields[p].description or desc
                nxt.extend(union_members(m.model_fields[p].annotation))
        models = nxt
    return models, desc


def fields_at(root: type[BaseModel], path: Sequence[Any]) -> list[str]:
    """All field names that may appear at a (tag-free) path, for suggestions."""
    names: list[str] = []
    for m in models_at(root, path)[0]:
        names.extend(n for n in m.model_fields if n not in names)
    return names


def homes(root: type[BaseModel], name: str, here: Sequence[str] = ()) -> list[str]:
    """Where ``name`` is a key or a kind of a section under ``root``, in words.

    E.g. ``["a key of studies of kind predictive or price_of_mean_field", "a kind of
    studies"]``, in schema order, leaving out the section at the (tag-free) path ``here``:
    for an unknown key that belongs somewhere else.
    """
    keys: dict[str, set[str]] = {}
    kinds: list[str] = []
    stack: list[tuple[type[BaseModel], tuple[str, ...]]] = [(root, ())]
    while stack:
        model, path = stack.pop(0)
        where = ".".join(path)
        kind = kind_of(model)
        if name in model.model_fields and list(path) != list(here):
            keys.setdefault(where, set()).add(kind)
        if kind == name and where not in kinds:
            kinds.append(where)
        if len(path) < 4:  # the spec nests sections at most this deep
            for field, info in model.model_fields.items():
                stack += [(m, (*path, field)) for m in union_members(info.annotation)]
    out = []
    for where, ks in keys.items():
        named = sorted(k for k in ks if k is not None)
        of = f" of kind {' or '.join(named)}" if named and None not in ks else ""
        out.append(f"a key of {where or 'the spec'}{of}")
    return out + [f"a kind of {where}" for where in kinds]


def path_in_schema(root: type[BaseModel], key: str) -> bool:
    """Whether the dotted ``key`` (list indices allowed) names a field under ``root``."""
    parts = parse_path(key)
    while parts and isinstance(parts[-1], int):  # an element of a list field
        parts.pop()
    if not parts or not parts[-1]:
        return False
    return parts[-1] in fields_at(root, parts[:-1])


def suggest_path(root: type[BaseModel], key: str) -> str:
    """``"; did you mean 'model.depth'?"`` for a misspelt dotted key, or the fields there."""
    parts = key.split(".")
    options = fields_at(root, parts[:-1])
    close = difflib.get_close_matches(parts[-1], options, n=1)
    if close:
        return f"; did you mean {'.'.join([*parts[:-1], close[0]])!r}?"
    return f"; fields there: {', '.join(options)}" if options else ""
