"""The Laplace price of mean field on a grid of two sweep axes, drawn both ways. The numbers
are :mod:`reports.laplace`'s."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = [
    "grid_figure",
]


def grid_figure(
    mean: np.ndarray,
    se: np.ndarray,
    rows: Sequence[float],
    cols: Sequence[float],
    *,
    row_label: str = "depth",
    col_label: str = "width",
    ylabel: str = "KL(q_diag || q_full) (nats)",
    log: bool = True,
) -> Figure:
    """A measure on a grid, both ways: against the rows' axis with one line per column
    value (left), and against the columns' axis with one line per row value (right).

    Parameters
    ----------
    mean, se : np.ndarray
        Shape ``(len(rows), len(cols))``; NaN where a cell is missing.
    rows, cols : sequence of float
        The axis values (e.g. depths, widths).
    row_label, col_label, ylabel : str
    log : bool
        A logarithmic y axis (for a measure spanning decades).

    Returns
    -------
    matplotlib.figure.Figure
    """
    mean, se = np.asarray(mean, float), np.asarray(se, float)
    rows, cols = np.asarray(rows, float), np.asarray(cols, float)
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    for j, c in enumerate(cols):
        left.errorbar(
            rows, mean[:, j], yerr=se[:, j], marker="o", capsize=3, label=f"{col_label} {c:g}"
        )
    for i, r in enumerate(rows):
        right.errorbar(cols, mean[i], yerr=se[i], marker="o", capsize=3, label=f"{row_label} {r:g}")
    for ax, xl, title in (
        (left, row_label, f"fixed {col_label}"),
        (right, col_label, f"fixed {row_label}"),
    ):
        ax.set_xlabel(xl)
        ax.set_title(title, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize="x-small")
        if log:
            ax.set_yscale("log")
    right.set_xscale("log", base=2)
    right.set_xticks(cols, [f"{c:g}" for c in cols])
    left.set_ylabel(ylabel)
    return fig
