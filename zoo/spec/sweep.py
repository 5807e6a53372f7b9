"""The sweep: axes over spec fields, the cells they expand to, and the cells' ids.

The one sweep-axis rule: an axis ``inference.<name>.<field>`` belongs to that method (the
other methods' cells do not repeat over it); every other axis (``model.depth``, ``seed``,
``split`` for ``data.split``) applies to every method. A cell is one combination of the
axes and one method. An axis names one setting that changes the numbers (never a whole
section or method, nor the name, description, report or runtime), and no two values of an
axis, nor two axes, give the same cells (:func:`axis_problem`, :func:`sweep_problems`).

A cell id is a readable prefix (method and axis values, at most :data:`MAX_SLUG` characters)
and a hash of the cell's configuration written without defaults, together with
:data:`SPEC_VERSION`: a field added later at its default leaves every id unchanged, and a
change of what the ids mean bumps the version (recorded in a run's ``spec.yaml``). Data read
from files of the user (a CSV, a directory of IDX files) enters the hash as the SHA-256 of
the files' bytes, not their path, so a moved checkout keeps its ids (both in
:mod:`zoo.spec.cell_ids`, re-exported here). No torch import here.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import TYPE_CHECKING, Any, get_origin

from pydantic import BaseModel, ValidationError

from zoo.spec.base import union_members
from zoo.spec.cell_ids import MAX_ID, MAX_SLUG, SPEC_VERSION, cell_id, id_config
from zoo.spec.paths import models_at, parse_path, path_in_schema, set_path, suggest_path
from zoo.spec.sections.bounds import MAX_AXIS_VALUES, MAX_CELLS

if TYPE_CHECKING:
    from zoo.spec.schema import Spec

__all__ = [
    "AXIS_ALIASES",
    "MAX_ID",
    "MAX_SLUG",
    "SPEC_VERSION",
    "Cell",
    "axis_problem",
    "cell_id",
    "cells",
    "same_setting_problem",
    "set_setting",
    "sweep_problems",
]

#: Sweep axes that stand for a deeper field (the column keeps the short name):
#: ``split`` is the UCI train/test split index of the data (``data.split``).
AXIS_ALIASES = {"split": "data.split"}

#: Top-level sections that are not swept: they do not change a cell's numbers (name,
#: description, report, runtime), or are not a setting (sweep), or have their own rule
#: (inference: ``inference.<method>.<field>``), or are no sweep of networks (simulation).
_UNSWEPT = ("name", "description", "sweep", "inference", "simulation", "report", "runtime")

_WHY_UNSWEPT = {
    "name": "it does not change the cells' numbers",
    "description": "it does not change the cells' numbers",
    "report": "it does not change the cells' numbers",
    "runtime": "it says where and in which precision all cells run; set it, or run the spec "
    "once per setting",
}

#: What the axes can be, for messages.
_AXES_HELP = (
    "an axis names one setting, e.g. seed, split, model.depth, data.noise, prior.scale or "
    "inference.<method name>.<field> (inference.mfvi.lr, inference.kt.guide.rank)"
)

# what changes a cell's numbers: not its name, description, sweep, report or device
_CONFIG_FIELDS: dict[str, Any] = {
    "seed": True,
    "data": True,
    "model": True,
    "prior": True,
    "likelihood": True,
    "metrics": True,
    "runtime": {"dtype"},
}


#: Fields named first in the example of a "whole section" message.
_EXAMPLES = ("depth", "init_scale", "scale", "noise", "rank", "draws", "cov")


def _schema_parts(key: str) -> list[Any]:
    """The schema path of an axis: aliases resolved, the method name of
    ``inference.<name>.<field>`` dropped."""
    parts = parse_path(AXIS_ALIASES.get(key, key))
    if parts and parts[0] == "inference" and len(parts) >= 2:
        parts = ["inference", *parts[2:]]
    return parts


def _sections_at(root: type[BaseModel], parts: list[Any]) -> tuple[list[type[BaseModel]], bool]:
    """The section classes a value at schema path ``parts`` would be (none: a plain value),
    and whether the path names a list of them rather than one element."""
    listed = bool(parts) and not isinstance(parts[-1], int)
    while parts and isinstance(parts[-1], int):  # an element of a list field
        parts = parts[:-1]
    out: list[type[BaseModel]] = []
    for m in models_at(root, parts[:-1])[0]:
        if parts and parts[-1] in m.model_fields:
            annotation = m.model_fields[parts[-1]].annotation
            out.extend(union_members(annotation))
            listed = listed and get_origin(annotation) is list
    return out, listed


def _value_key(value: Any) -> str:
    """A canonical text of a sweep value, to find values written twice."""
    return json.dumps(value, sort_keys=True, default=repr)


def axis_problem(root: type[BaseModel], key: str, values: Any) -> str | None:
    """What is wrong with the sweep axis ``key: values`` of a spec of class ``root``, or None.

    An axis names one setting that changes the cells' numbers (not a whole section, not
    the name, description, report or runtime); its values are a list of at most
    :data:`~zoo.spec.sections.bounds.MAX_AXIS_VALUES` values, none written twice.
    """
    top = key.split(".")[0]
    if top in _UNSWEPT and not key.startswith("inference."):
        why = _WHY_UNSWEPT.get(top, "it is not a setting of the cells")
        return f"cannot sweep over {key!r} ({why}); {_AXES_HELP}"
    if key.startswith("inference."):  # a method's own field: inference.<name>.<path>
        if len(key.split(".")) < 3 or not key.split(".")[2]:
            name = key.split(".")[1] or "<method name>"
            return (
                f"sweep axis {key!r} is a whole method; sweep one of its fields: "
                f"inference.{name}.<field>, e.g. inference.{name}.lr"
            )
    elif key not in AXIS_ALIASES and not path_in_schema(root, key):
        return f"{key!r} is not a spec field{suggest_path(root, key)}; {_AXES_HELP}"
    parts = _schema_parts(key)
    if parts[-1] == "kind" and _sections_at(root, parts[:-1])[0]:
        what = (
            "give one inference method per kind instead"
            if parts[0] == "inference"
            else "write one spec per kind instead"
        )
        return (
            f"sweep axis {key!r} changes the kind of a section; the kinds have different "
            f"fields, so one spec cannot hold them: {what}"
        )
    sections, listed = _sections_at(root, parts)
    if sections:
        fields = sorted({f for m in sections for f in m.model_fields if f != "kind"})
        known = [f for f in _EXAMPLES if f in fields] + fields
        example = f"{key}{'.0' if listed else ''}.{known[0]}" if known else key
        return (
            f"sweep axis {key!r} is a whole section; sweep one of its fields instead "
            f"(e.g. {example}; fields: {', '.join(fields)})"
        )
    if isinstance(values, list):
        if not values:
            return "the axis is empty; give at least one value"
        if len(values) > MAX_AXIS_VALUES:
            return f"{len(values)} values; an axis has at most {MAX_AXIS_VALUES}"
        seen: dict[str, int] = {}
        for i, v in enumerate(values):
            j = seen.setdefault(_value_key(v), i)
            if j != i:
                return (
                    f"value {v!r} is given twice (positions {j} and {i}); each value is "
                    "one cell: remove the repeat"
                )
    return None


def sweep_problems(spec: Spec) -> list[tuple[str, str]]:
    """``(path, message)`` for each problem of the sweep as a whole.

    Two axes that set the same field; more than :data:`MAX_CELLS` cells; and two values of
    one axis that validate to the same setting (``1`` and ``1.0``, ``0`` and ``"0"``, two
    data files of the same bytes), which would give the same cell twice.
    """
    out: list[tuple[str, str]] = []
    setters: dict[tuple[str, ...], str] = {}
    for key in spec.sweep:
        first = setters.setdefault(tuple(axis_path(key)), key)
        if first != key:
            out.append((f"sweep.{key}", f"sets the same field as the axis {first!r}; keep one"))
    n = math.prod(len(v) for v in spec.sweep.values()) * max(len(spec.inference), 1)
    if n > MAX_CELLS:
        sizes = " x ".join(f"{len(v)} ({k})" for k, v in spec.sweep.items())
        out.append(
            (
                "sweep",
                f"{n:,} cells ({sizes} x {len(spec.inference)} methods); a spec "
                f"has at most {MAX_CELLS:,}: split it into several specs",
            )
        )
    if out:
        return out
    for key, values in spec.sweep.items():
        problem = same_setting_problem(spec, key, values)
        if problem:
            out.append((f"sweep.{key}", problem))
    return out


def same_setting_problem(spec: Spec, key: str, values: list[Any]) -> str | None:
    """Two of ``values`` of the axis (or tune grid path) ``key`` that validate to the same
    setting of ``spec`` (``1`` and ``1.0``, ``1`` and ``true``, two data files of the same
    bytes), which would give the same cell twice; None if there are none.

    Each value is set in the spec as written (:func:`_written`) and compared as the cell
    ids see it; a value that does not validate is skipped (the loader reports it).
    """
    base = _written(spec)
    seen: dict[str, Any] = {}
    for value in values:
        d = json.loads(json.dumps(base))
        try:  # a method the spec does not have: _method_problems names it
            set_setting(d, spec, key, value)
            cell = type(spec).model_validate(d)
        except (ValidationError, KeyError):
            continue  # the loader reports the value where it stands
        # as the ids see it: two data files of the same bytes are the same data
        resolved = json.dumps(id_config(cell.model_dump(mode="json"), cell.data))
        if resolved in seen:
            return (
                f"values {seen[resolved]!r} and {value!r} are the same setting (the same "
                "cell twice); remove one"
            )
        seen[resolved] = value
    return None


def _written(spec: Spec) -> dict[str, Any]:
    """The spec as written (fields left at their defaults stay out), without its sweep and tune:
    what the loader validates each sweep value against, so the cells are what it checked."""
    d = spec.model_dump(mode="json", exclude_unset=True)
    d.pop("sweep", None)
    d.pop("tune", None)  # its checks are of the whole sweep (zoo.spec.tuning)
    return d


def set_setting(d: dict[str, Any], spec: Spec, key: str, value: Any) -> None:
    """Set the axis or grid path ``key`` of spec data ``d`` (as written, of ``spec``) to
    ``value``; a section ``d`` leaves at its default is written out first (its kind is
    needed beside the value: ``prior.scale`` of a spec without a ``prior`` section)."""
    top = axis_path(key)[0]
    section = getattr(spec, top, None)
    if top not in d and hasattr(section, "model_dump"):
        d[top] = section.model_dump(mode="json")
    set_path(d, axis_path(key), value)


def axis_path(key: str) -> list[str]:
    """The spec path that a sweep axis sets."""
    return AXIS_ALIASES.get(key, key).split(".")


def cells(spec: Spec) -> list[Cell]:
    """Expand the sweep: the product of the axes (in spec order) and the methods.

    An axis ``inference.<name>.<field>`` (e.g. ``inference.ktied.guide.rank: [1, 2, 3]``)
    belongs to that method only: the other methods' cells do not repeat over it.

    Returns
    -------
    list of Cell
        One cell per combination; ``cell.spec`` is ``spec`` with the axis values filled in
        (and no sweep), ``cell.method`` the inference method of the cell.
    """
    keys = list(spec.sweep)
    out: list[Cell] = []
    base = _written(spec)
    for values in itertools.product(*(spec.sweep[k] for k in keys)):
        d = json.loads(json.dumps(base))
        for k, val in zip(keys, values, strict=True):
            set_path(d, axis_path(k), val)
        resolved = type(spec).model_validate(d)
        for method in resolved.inference:
            axes = {}
            for k, val in zip(keys, values, strict=True):
                if not k.startswith("inference."):
                    axes[k] = val
                elif k.split(".")[1] == method.name:
                    axes[k] = val
                elif val != spec.sweep[k][0]:
                    break  # another method's axis: that method's cells cover its values
            else:
                axes["method"] = method.name
                out.append(Cell(resolved, method, axes))
    return out


class Cell:
    """One sweep cell: a resolved spec (no sweep) and one inference method.

    Attributes
    ----------
    spec : Spec
        The spec with this cell's axis values filled in.
    method : section of zoo.spec.sections.inference
        The inference method run in this cell.
    axes : dict
        Axis name -> value, plus ``method``.
    studies : list of study sections
        The studies that record this cell (``spec.studies_for(method)``).
    cell_id : str
        Stable id: readable axis values and a hash of :meth:`config`, so a changed
        configuration never matches a finished cell.
    """

    __slots__ = ("spec", "method", "axes", "studies", "cell_id")

    def __init__(self, spec: Spec, method: Any, axes: dict[str, Any]) -> None:
        self.spec = spec
        self.method = method
        self.axes = axes
        self.studies = spec.studies_for(method)
        self.cell_id = cell_id(id_config(self.config(), spec.data), axes)

    def config(self) -> dict[str, Any]:
        """What changes this cell's numbers, as JSON-able data without default values.

        The resolved data, model, prior, likelihood, metrics, seed and dtype; the method;
        the studies recording it (without their ``methods`` lists); and the method whose
        posterior mean starts a sampler (``init_from``), refitted in the cell.
        """
        d = self.spec.model_dump(mode="json", include=_CONFIG_FIELDS, exclude_defaults=True)
        d = {k: v for k, v in d.items() if v != {}}  # runtime: a device but dtype at default
        d["method"] = self.method.model_dump(mode="json", exclude_defaults=True)
        if self.studies:
            d["studies"] = [
                s.model_dump(mode="json", exclude_defaults=True, exclude={"methods"})
                for s in self.studies
            ]
        ref = getattr(self.method, "init_from", "prior")
        if ref != "prior":
            d["init_method"] = self.spec.method(ref).model_dump(mode="json", exclude_defaults=True)
        return d

    def __repr__(self) -> str:
        return f"Cell({self.cell_id})"
