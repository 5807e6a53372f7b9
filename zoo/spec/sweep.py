"""The sweep: axes over spec fields, the cells they expand to, and the cells' ids.

The one sweep-axis rule: an axis ``inference.<name>.<field>`` belongs to that method (the
other methods' cells do not repeat over it); every other axis (``model.depth``, ``seed``,
``split`` for ``data.split``) applies to every method. A cell is one combination of the
axes and one method.

A cell id is a readable prefix (method and axis values, at most :data:`MAX_SLUG` characters)
and a hash of the cell's configuration written without defaults, together with
:data:`SPEC_VERSION`: a field added later at its default leaves every id unchanged, and a
change of what the ids mean bumps the version (recorded in a run's ``spec.yaml``).
:func:`legacy_cell_id` is the rule of the previous version, for ``zoo migrate``.
No torch import here.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from zoo.spec.paths import path_in_schema, set_path, suggest_path

if TYPE_CHECKING:
    from zoo.spec.schema import Spec

__all__ = [
    "AXIS_ALIASES",
    "MAX_SLUG",
    "SPEC_VERSION",
    "Cell",
    "axis_problem",
    "cell_id",
    "cells",
    "legacy_cell_id",
]

#: Version of the cell-id rule; 1 was the rule of :func:`legacy_cell_id`.
SPEC_VERSION = 2

#: Most characters of the readable part of a cell id (the hash follows it).
MAX_SLUG = 80

#: Sweep axes that stand for a deeper field (the column keeps the short name):
#: ``split`` is the UCI train/test split index of the data (``data.split``).
AXIS_ALIASES = {"split": "data.split"}

_UNSWEPT = ("name", "sweep", "inference", "simulation", "runtime")

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


def axis_problem(root: type[BaseModel], key: str, values: Any) -> str | None:
    """What is wrong with the sweep axis ``key: values`` of a spec of class ``root``, or None."""
    if key.split(".")[0] in _UNSWEPT and not key.startswith("inference."):
        return f"cannot sweep over {key!r}"
    if key.startswith("inference."):  # a method's own field: inference.<name>.<path>
        if len(key.split(".")) < 3:
            return f"sweep axis {key!r}: use inference.<method name>.<field>"
    elif key not in AXIS_ALIASES and not path_in_schema(root, key):
        return f"{key!r} is not a spec field{suggest_path(root, key)}"
    if isinstance(values, list) and not values:
        return "the axis is empty; give at least one value"
    return None


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
    base = spec.model_dump(mode="json")
    for values in itertools.product(*(spec.sweep[k] for k in keys)):
        d = json.loads(json.dumps(base))
        d["sweep"] = {}
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
        self.cell_id = cell_id(self.config(), axes)

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
            d["studies"] = [s.model_dump(mode="json", exclude_defaults=True,
                                         exclude={"methods"}) for s in self.studies]  # fmt: skip
        ref = getattr(self.method, "init_from", "prior")
        if ref != "prior":
            d["init_method"] = self.spec.method(ref).model_dump(mode="json", exclude_defaults=True)
        return d

    def __repr__(self) -> str:
        return f"Cell({self.cell_id})"


def _slug(axes: Mapping[str, Any]) -> str:
    parts = [str(axes["method"])]
    for k, v in axes.items():
        if k != "method":
            parts.append(f"{k.split('.')[-1]}={v}")
    slug = "_".join(parts)
    return "".join(c if c.isalnum() or c in "=-_." else "-" for c in slug)


def cell_id(config: Mapping[str, Any], axes: Mapping[str, Any]) -> str:
    """The id of a cell with this :meth:`Cell.config` and these axes.

    ``<slug>_<hash>``: the slug is the method and the axis values (cut at
    :data:`MAX_SLUG` characters), the hash the first 12 hex digits of the SHA-256 of the
    configuration and :data:`SPEC_VERSION`.
    """
    payload = json.dumps({"spec_version": SPEC_VERSION, "config": config}, sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:12]
    return f"{_slug(axes)[:MAX_SLUG]}_{digest}"


def legacy_cell_id(config: Mapping[str, Any], axes: Mapping[str, Any]) -> str:
    """The cell id of version 1 (before :data:`SPEC_VERSION`), from a stored configuration.

    ``config`` is the ``config`` a version-1 run stored for the cell (the full resolved
    configuration, late fields at their defaults left out); the id is the slug and the
    first 10 hex digits of the SHA-256 of ``json.dumps(config, sort_keys=True)``.
    """
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    return f"{_slug(axes)}_{digest}"
