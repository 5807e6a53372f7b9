"""The base of every spec section and helpers for discriminated unions.

A section is a frozen pydantic model that rejects unknown keys. A union of sections is
discriminated by the literal ``kind`` field of each member; :func:`union_members` and
:func:`kind_of` let the loader and the schema walker read a union without keeping lists
of kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

V = TypeVar("V")

__all__ = ["Section", "Strict", "kind_of", "member_for_kind", "registered", "union_members"]


class Section(BaseModel):
    """Base of every spec section: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Strict = Section  # the name of the base before sections moved to zoo.spec.base


def union_members(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes inside an annotation (through Annotated, Optional, list, unions)."""
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
        else:
            stack.extend(get_args(a))
    return found


def kind_of(model: type[BaseModel]) -> Any:
    """The ``kind`` tag of a union member (its one-value Literal), or None."""
    f = model.model_fields.get("kind")
    if f is None:
        return None
    args = get_args(f.annotation)
    return args[0] if len(args) == 1 else None


def member_for_kind(annotation: Any, kind: Any) -> type[BaseModel] | None:
    """The member of a discriminated union whose ``kind`` tag is ``kind``, or None."""
    return next((m for m in union_members(annotation) if kind_of(m) == kind), None)


def registered(table: Mapping[type, V], section: Any, what: str, where: str) -> V:
    """The entry of ``table`` (keyed by section class) for ``section``.

    Every domain package keeps its table keyed by the spec's section classes (data loaders,
    model builders, priors, likelihoods, guides, inference methods, studies); this is the one
    lookup they share.

    Raises
    ------
    TypeError
        If the section's class has no entry: names the class and the table to register in
        (``where``, e.g. ``"zoo.data.LOADERS"``), ``what`` naming the kind of entry.
    """
    try:
        return table[type(section)]
    except KeyError:
        raise TypeError(
            f"no {what} for {type(section).__name__}; register one in {where}"
        ) from None
