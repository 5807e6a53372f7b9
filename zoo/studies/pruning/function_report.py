"""The posterior-function section of the over-pruning study (Trippe & Turner 2018, Fig. 3).

For a regression on one input, each cell's ``.pruning.npz`` holds posterior function draws
on a grid (:func:`zoo.studies.pruning.probe.function_arrays`). One figure per combination
of the sweep's other axes (the first three), with a row per value of its last non-seed axis
(the training-set size in ``specs/overpruning_teacher*.yaml``) and a column per method,
for the first stored seed or split: what the paper shows to argue that MF's pruned network
explains the teacher's data with a simpler function than the teacher's.
"""

from __future__ import annotations

from typing import Any

from reports.document import section
from reports.figures.pruning import posterior_function_figure

__all__ = ["function_section"]


def function_section(ok, methods: list[Any], groups: list[str], over: str, load) -> list:
    """``[section]`` with the posterior-function figures, or [] when no cell stored them.

    ``ok``: the results rows that finished; ``groups``: the sweep axes other than the seed
    or split (``over``) and the method's own; ``load(cell_id)``: a cell's npz arrays or None.
    """
    if not groups:
        return []
    row_axis, rest = groups[-1], groups[:-1]
    first = ok[over].iloc[0] if over in ok.columns else None
    rows_df = ok if first is None else ok[ok[over] == first]
    keys = (
        list(rows_df[rest].drop_duplicates().itertuples(index=False, name=None)) if rest else [()]
    )
    figs = []
    for key in keys[:3]:
        r = rows_df
        for g, v in zip(rest, key, strict=True):
            r = r[r[g] == v]
        panels, order = {}, {}
        for _, cell in r.iterrows():
            z = load(str(cell["cell_id"]))
            if z is None or "fn.x" not in z:
                continue
            row = f"{row_axis.split('.')[-1]} {cell[row_axis]}"
            panels[(row, str(cell["method"]))] = z
            order[row] = cell[row_axis]
        if not panels:
            continue
        rows = sorted(order, key=order.get)
        cols = [m.name for m in methods if any(c == m.name for _, c in panels)]
        tag = ", ".join([*(f"{g}={v}" for g, v in zip(rest, key, strict=True)), f"{over} {first}"])
        stem = "_".join(f"{g.split('.')[-1]}{v}" for g, v in zip(rest, key, strict=True))
        figs.append(
            (
                f"pruning_functions{'_' + stem if stem else ''}",
                posterior_function_figure(panels, rows, cols, title=f"posterior functions ({tag})"),
            )
        )
    if not figs:
        return []
    para = (
        "Posterior functions, as in Trippe & Turner's Figure 3: the teacher's function "
        "(dashed, where the data come from one), the posterior mean with +-2 standard "
        "deviations of the function (shaded; the observation noise is not included), 20 "
        "posterior draws (thin) and the training points, for the first stored "
        f"{over}. A method that prunes units explains the data with a simpler function "
        "than the teacher's; with few points the posterior should stay wide between them."
    )
    return [section("Over-pruning: posterior functions", [para], figures=figs)]
