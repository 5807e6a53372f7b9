"""The cells of a spec's ``tune`` section, its checks, and main cells with chosen values.

A spec with ``tune`` (:class:`~zoo.spec.sections.tune.TuneSpec`) has two kinds of cells:

- *tuning cells*: for each tuned method, each combination of the sweep axes not in
  ``tune.at`` (at the ``at`` values) and each grid combination that applies to the
  method, the cell with those grid values and ``data.validation_fraction`` set (so it
  scores on a held-out part of its training data) and the axis ``tune`` (the fraction)
  plus one ``tune.<path>`` axis per grid path: own ids, stored like any cell;
- *main cells*: the sweep's cells (:func:`zoo.spec.sweep.cells`) where each tuned
  method's cells get the chosen grid values written into their configuration and a
  ``tuned.<path>`` axis each (:func:`tuned_cell`), so their ids name the values.

Which values are chosen is the run's business (:mod:`zoo.execution.tune` reads the stored
tuning cells); this module only makes cells. No torch import here.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

from pydantic import ValidationError

from zoo.spec.sections.bounds import MAX_CELLS
from zoo.spec.sections.tune import TUNING_CELL
from zoo.spec.sweep import (
    Cell,
    axis_path,
    axis_problem,
    cells,
    same_setting_problem,
    set_setting,
)

__all__ = [
    "grid_keys",
    "group_key",
    "tune_problems",
    "tuned_cell",
    "tuned_methods",
    "tuning_cells",
]


#: The path of the data's validation part: a tuning cell's own, never a grid path.
_VALIDATION_PATH = ["data", "validation_fraction"]


def grid_keys(spec: Any, method: Any) -> list[str]:
    """The grid paths of ``spec.tune`` that apply to ``method``, in grid order.

    ``inference.<name>.<field>`` applies to method ``<name>`` only; ``prior.*`` to the
    methods whose target has the prior (``uses_prior``: not ``mle``); any other path to
    every method.
    """
    out = []
    for key in spec.tune.grid:
        parts = key.split(".")
        if parts[0] == "inference":
            if len(parts) > 1 and parts[1] == method.name:
                out.append(key)
        elif parts[0] != "prior" or getattr(method, "uses_prior", True):
            out.append(key)
    return out


def tuned_methods(spec: Any) -> list[str]:
    """The names of the tuned methods: ``tune.methods``, or every method with a grid path."""
    if spec.tune is None:
        return []
    if spec.tune.methods is not None:
        return list(spec.tune.methods)
    return [m.name for m in spec.inference if grid_keys(spec, m)]


def group_key(spec: Any, cell: Cell) -> str:
    """The search a cell belongs to: its method and its values of the axes not in ``at``."""
    at = spec.tune.at if spec.tune is not None else {}
    rest = {k: v for k, v in cell.axes.items() if k not in at and not k.startswith("tune")}
    return json.dumps(rest, sort_keys=True, default=repr)


def _derived(cell: Cell, values: dict[str, Any], axes: dict[str, Any], vf: float | None) -> Cell:
    """``cell`` with the spec paths ``values`` set (and the data's validation fraction).

    Only a tuning cell (``vf`` given) is validated as one (:data:`TUNING_CELL`): a main cell
    with a held-out validation part is refused, so it always scores on the test part.
    """
    d = cell.spec.model_dump(mode="json", exclude_unset=True)
    d.pop("tune", None)
    for key, value in values.items():
        set_setting(d, cell.spec, key, value)
    if vf is not None:
        d["data"]["validation_fraction"] = vf
    resolved = type(cell.spec).model_validate(d, context=TUNING_CELL if vf is not None else None)
    return Cell(resolved, resolved.method(cell.method.name), axes)


def tuned_cell(cell: Cell, values: dict[str, Any]) -> Cell:
    """The main cell ``cell`` with the chosen grid ``values`` (path -> value) in its
    configuration and a ``tuned.<path>`` axis each."""
    axes = {**cell.axes, **{f"tuned.{k}": v for k, v in values.items()}}
    return _derived(cell, values, axes, None)


def tuning_cells(spec: Any) -> list[tuple[str, dict[str, Any], Cell]]:
    """``(group key, grid values, cell)`` of each tuning cell of ``spec``, in spec order.

    Per search (method and values of the axes not in ``at``, :func:`group_key`) the cells
    come in grid order: the product of the grid paths that apply to the method.
    """
    if spec.tune is None:
        return []
    t, tuned = spec.tune, set(tuned_methods(spec))
    out = []
    for cell in cells(spec):
        if cell.method.name not in tuned:
            continue
        if any(k in cell.axes and cell.axes[k] != v for k, v in t.at.items()):
            continue
        keys = grid_keys(spec, cell.method)
        for combo in itertools.product(*(t.grid[k] for k in keys)):
            values = dict(zip(keys, combo, strict=True))
            axes = {
                **cell.axes,
                "tune": t.validation_fraction,
                **{f"tune.{k}": v for k, v in values.items()},
            }
            out.append(
                (group_key(spec, cell), values, _derived(cell, values, axes, t.validation_fraction))
            )
    return out


def cells_text(spec: Any, short: bool = False) -> str:
    """How much a spec runs, as ``zoo validate``, ``zoo list`` and ``zoo run`` say it.

    A simulation says so; a spec with ``tune`` counts its tuning cells beside the main
    cells, since both run (``"200 cells after 42 tuning cells"``, short: ``"200+42 tuning"``).
    """
    if spec.simulation is not None:
        return "simulation"
    n, k = len(spec.cells()), len(tuning_cells(spec))
    if not k:
        return f"{n} cells"
    return f"{n}+{k} tuning" if short else f"{n} cells after {k} tuning cells"


def tune_problems(spec: Any) -> list[tuple[str, str]]:
    """``(path, message)`` for each problem of ``spec.tune`` (none when it has none).

    A grid path must name one setting (as a sweep axis would), must not be a sweep axis nor
    ``data.validation_fraction`` (the main cells would score on held-out training rows),
    and its values must validate and be distinct settings (the sweep's own checks,
    :func:`~zoo.spec.sweep.axis_problem` and :func:`~zoo.spec.sweep.same_setting_problem`);
    ``methods`` must be left out or name methods of the spec, each with a grid path that
    applies to it; ``at`` must name sweep axes and one of their values;
    ``metric`` must be one the cells compute.
    """
    t = spec.tune
    if t is None:
        return []
    names = [m.name for m in spec.inference]
    out = _grid_problems(spec, names)
    out += _method_problems(spec, names, sound=not out)
    out += _at_and_metric_problems(spec)
    return out or _cell_problems(spec)


def _grid_problems(spec: Any, names: list[str]) -> list[tuple[str, str]]:
    """Each grid path names one setting, not the validation part, a method of the spec,
    nor a sweep axis."""
    t, out = spec.tune, []
    if not t.grid:
        out.append(("tune.grid", "empty; give at least one path, e.g. prior.scale: [0.1, 1.0]"))
    for key, values in t.grid.items():
        problem = axis_problem(type(spec), key, values)
        if problem:
            out.append((f"tune.grid.{key}", problem.replace("sweep axis", "grid path")))
        elif axis_path(key) == _VALIDATION_PATH:
            out.append(
                (
                    f"tune.grid.{key}",
                    "cannot be tuned: the main cells take the chosen grid values and would "
                    "then score on held-out training rows instead of the test part; remove "
                    "the path (tune.validation_fraction sets the tuning cells' validation part)",
                )
            )
        elif key.startswith("inference.") and key.split(".")[1] not in names:
            out.append(
                (
                    f"tune.grid.{key}",
                    f"{key.split('.')[1]!r} is not an inference method of this spec; "
                    f"methods: {names}",
                )
            )
        elif key in spec.sweep or axis_path(key) in [axis_path(k) for k in spec.sweep]:
            out.append(
                (
                    f"tune.grid.{key}",
                    "is also a sweep axis: a field is either swept or tuned; remove it "
                    "from one of them",
                )
            )
    return out


def _method_problems(spec: Any, names: list[str], sound: bool) -> list[tuple[str, str]]:
    """``methods`` is left out or names methods of the spec, each with a grid path that
    applies (asked only when the grid is ``sound``); a method's own grid path names a tuned
    method."""
    t, out = spec.tune, []
    if t.methods == []:
        out.append(
            (
                "tune.methods",
                "empty: no method would be tuned; name the methods to tune, or leave "
                "methods out (every method some grid path applies to)",
            )
        )
    for j, name in enumerate(t.methods or []):
        if name not in names:
            out.append(
                (f"tune.methods[{j}]", f"{name!r} is not an inference method; methods: {names}")
            )
        elif sound and not out and not grid_keys(spec, spec.method(name)):
            out.append(
                (
                    f"tune.methods[{j}]",
                    f"no grid path applies to {name!r} (prior.* does not apply to a method "
                    f"without a prior); add inference.{name}.<field> to tune.grid, or "
                    "leave it out of tune.methods",
                )
            )
    if t.methods is None and sound and t.grid and not tuned_methods(spec):
        out.append(("tune.grid", "no grid path applies to any method of this spec"))
    for key in t.grid:
        parts = key.split(".")
        if parts[0] == "inference" and t.methods is not None and parts[1] in names:
            if parts[1] not in t.methods:
                out.append(
                    (
                        f"tune.grid.{key}",
                        f"method {parts[1]!r} is not in tune.methods {t.methods}; add it "
                        "there or remove the path",
                    )
                )
    return out


def _at_and_metric_problems(spec: Any) -> list[tuple[str, str]]:
    """``at`` names sweep axes and one of their values; ``metric`` is one the cells compute."""
    t, out = spec.tune, []
    for key, value in t.at.items():
        if key not in spec.sweep:
            out.append(
                (
                    f"tune.at.{key}",
                    f"not a sweep axis of this spec (axes: {list(spec.sweep)}); the grid "
                    "is searched at one value of a sweep axis, e.g. at: {split: 0}",
                )
            )
        elif value not in spec.sweep[key]:
            out.append(
                (f"tune.at.{key}", f"{value!r} is not one of the axis' values {spec.sweep[key]}")
            )
    computed = spec.metrics.names or list(spec.likelihood.metrics)
    if t.metric not in computed:
        out.append(
            (
                "tune.metric",
                f"{t.metric!r} is not a metric these cells compute; choose from {computed}",
            )
        )
    return out


def _cell_problems(spec: Any) -> list[tuple[str, str]]:
    """The grid's values are distinct settings, its tuning cells at most
    :data:`~zoo.spec.sections.bounds.MAX_CELLS`, and each of them validates."""
    t, out = spec.tune, []
    for key, values in t.grid.items():  # 3 and 3.0: the same tuning cell twice
        problem = same_setting_problem(spec, key, values)
        if problem:
            out.append((f"tune.grid.{key}", problem))
    if out:
        return out
    searches = math.prod(len(v) for k, v in spec.sweep.items() if k not in t.at)
    n = searches * sum(
        math.prod(len(t.grid[k]) for k in grid_keys(spec, m))
        for m in spec.inference
        if m.name in tuned_methods(spec)
    )
    if n > MAX_CELLS:
        return [
            (
                "tune",
                f"{n:,} tuning cells (the grid's combinations per method x {searches} "
                f"searches); at most {MAX_CELLS:,}: fewer grid values, or more axes in at",
            )
        ]
    try:
        tuning_cells(spec)
    except ValidationError as e:
        if _sweep_invalid(spec):  # a sweep value: the loader reports it where it stands
            return out
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        out.append(("tune.grid", f"a grid value does not validate: {where}: {err['msg']}"))
    except KeyError as e:
        out.append(("tune.grid", f"{e.args[0]}"))
    return out


def _sweep_invalid(spec: Any) -> bool:
    """Whether a cell of the sweep itself does not validate (not a grid value's fault)."""
    try:
        cells(spec)
    except ValidationError:
        return True
    return False
