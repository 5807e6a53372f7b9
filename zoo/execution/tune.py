"""The two phases of a spec with ``tune``: its tuning cells, the choice, its main cells.

:func:`plan` reads the stored tuning cells of a spec (:func:`zoo.spec.tuning.tuning_cells`)
and, per search (a tuned method and a combination of the sweep axes not in ``tune.at``),
picks the grid values with the best validation ``tune.metric`` (lower wins, higher for
accuracy; ties: the first grid value in grid order). A tuning cell that failed, or whose
metric is missing or not finite, is skipped and named; a search whose tuning cells all
failed makes its method's main cells fail with that message. The main cells of a search
whose choice is known get the chosen values (:func:`zoo.spec.tuning.tuned_cell`); those of
a search still running keep the spec's own values until it is done.

A spec without ``tune`` has no tuning cells and its main cells are :meth:`Spec.cells`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zoo.spec.sections.tune import HIGHER_IS_BETTER
from zoo.spec.tuning import group_key, tuned_cell, tuned_methods, tuning_cells

__all__ = ["Search", "TunePlan", "plan", "search_lines"]


@dataclass(frozen=True)
class Search:
    """One grid search: a tuned method at one combination of the other sweep axes.

    ``tried`` holds ``(grid values, metric or None, note)`` per tuning cell in grid order
    (None: not stored yet, failed or not finite; ``note`` says which); ``chosen`` is the
    index of the best one (None while cells are missing or when none succeeded), and
    ``error`` why none could be chosen.
    """

    method: str
    group: str
    tried: list[tuple[dict[str, Any], float | None, str]]
    chosen: int | None
    error: str = ""


@dataclass(frozen=True)
class TunePlan:
    """The cells of a run: tuning cells first, then main cells.

    ``failed`` maps the ids of main cells that cannot run (every tuning cell of their
    search failed) to the message their record gets; ``waiting`` holds the ids of main
    cells whose search is not done (they keep the spec's own values and must not run).
    """

    tuning: list[Any]
    main: list[Any]
    searches: list[Search] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    waiting: frozenset[str] = frozenset()

    @property
    def cells(self) -> list[Any]:
        """Every cell of the run, tuning cells first."""
        return [*self.tuning, *self.main]


def _score(rec: dict[str, Any] | None, metric: str) -> tuple[float | None, str]:
    if rec is None:
        return None, "pending"
    if rec.get("status") != "ok":
        return None, f"failed ({rec.get('error') or 'no message'})"
    value = (rec.get("metrics") or {}).get(metric)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None, f"{metric} = {value} (skipped)"
    return float(value), "ok"


def _search(spec: Any, method: str, group: str, cells: list[tuple], records) -> Search:
    metric = spec.tune.metric
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    tried = []
    for values, cell in cells:
        value, note = _score(records(cell.cell_id), metric)
        tried.append((values, value, note))
    if any(note == "pending" for _, _, note in tried):
        return Search(method, group, tried, None)
    scored = [(sign * v, i) for i, (_, v, _) in enumerate(tried) if v is not None]
    if not scored:
        why = "; ".join(f"{_label(vals)}: {note}" for vals, _, note in tried)
        return Search(method, group, tried, None, f"every tuning cell of {method} failed: {why}")
    best = min(scored)[1]  # ties: the lowest index, the first grid value
    return Search(method, group, tried, best)


def _label(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def plan(spec: Any, records: Callable[[str], dict[str, Any] | None]) -> TunePlan:
    """The tuning and main cells of ``spec`` given the stored ``records`` (id -> record).

    Parameters
    ----------
    spec : Spec
    records : callable
        The stored record of a cell id, or None (e.g. ``RunStore.record``).
    """
    if spec.tune is None:
        return TunePlan([], spec.cells())
    found = tuning_cells(spec)
    groups: dict[tuple[str, str], list[tuple]] = {}
    for group, values, cell in found:
        groups.setdefault((cell.method.name, group), []).append((values, cell))
    searches = {key: _search(spec, key[0], key[1], cells, records) for key, cells in groups.items()}
    tuned = set(tuned_methods(spec))
    main, failed, waiting = [], {}, set()
    for cell in spec.cells():
        search = searches.get((cell.method.name, group_key(spec, cell)))
        if cell.method.name not in tuned or search is None:
            main.append(cell)
        elif search.chosen is not None:
            main.append(tuned_cell(cell, search.tried[search.chosen][0]))
        else:
            main.append(cell)
            if search.error:
                failed[cell.cell_id] = search.error
            else:
                waiting.add(cell.cell_id)
    tuning = [c for _, _, c in found]
    return TunePlan(tuning, main, list(searches.values()), failed, frozenset(waiting))


def search_lines(tp: TunePlan, metric: str) -> list[str]:
    """One line per search: the values chosen and their validation metric, or why none."""
    out = []
    for s in tp.searches:
        where = ", ".join(f"{k}={v}" for k, v in json.loads(s.group).items() if k != "method")
        at = f" ({where})" if where else ""
        if s.chosen is not None:
            values, value, _ = s.tried[s.chosen]
            skipped = [n for _, _, n in s.tried if n != "ok"]
            extra = f"; {len(skipped)} tuning cell(s) skipped: {skipped[0]}" if skipped else ""
            out.append(
                f"tuned {s.method}{at}: {_label(values)} (validation {metric} {value:.4g}){extra}"
            )
        elif s.error:
            out.append(f"zoo: tuning {s.method}{at}: {s.error}; its main cells fail")
    return out
