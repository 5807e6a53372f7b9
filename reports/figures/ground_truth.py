"""The ground-truth check of the price-of-mean-field pipeline: the KL on growing prefixes of
the chains against 1/n_eff, with its extrapolation. The numbers are
:mod:`reports.ground_truth`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "ground_truth_figure",
]


def ground_truth_figure(rows: Sequence[dict[str, Any]], fractions: Sequence[float]) -> Figure:
    """KL against 1/n_eff per dimension: the fractions, the fitted line, the true KL."""
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.subplots()
    for i, r in enumerate(rows):
        color = f"C{i}"
        inv = np.array([1 / r[f"n_eff_f{round(100 * f)}"] for f in fractions])
        kl = np.array([r[f"kl_f{round(100 * f)}"] for f in fractions])
        ax.plot(inv, kl, "o", color=color, label=f"D = {r['dim']}: KL of the draws")
        grid = np.linspace(0, inv.max(), 20)
        ax.plot(grid, r["kl_extrapolated"] + r["bias_slope"] * grid, "--", color=color)
        ax.errorbar(
            [0],
            [r["kl_extrapolated"]],
            yerr=[r["kl_extrapolated_se"]],
            fmt="s",
            color=color,
            capsize=3,
        )
        ax.axhline(r["kl_true"], color=color, lw=0.8, ls=":", label=f"D = {r['dim']}: true KL")
    ax.set_xlabel("1 / n_eff")
    ax.set_ylabel("KL(q_diag || q_full), nats")
    right = ax.get_xlim()[1]
    ax.set_xlim(-0.03 * right, right)
    ax.legend(fontsize="small")
    return fig
