"""The ground-truth check of the price-of-mean-field pipeline: the KL on growing prefixes of
the chains against 1/n_eff, with the exact bias curve through the debiased KL. The numbers
are :mod:`reports.ground_truth`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from reports.gaussian import kl_sampling_bias

__all__ = [
    "ground_truth_figure",
]


def ground_truth_figure(rows: Sequence[dict[str, Any]], fractions: Sequence[float]) -> Figure:
    """KL against 1/n_eff per dimension: the fractions, the exact bias curve
    ``kl_debiased + b(n, D)`` (:func:`reports.gaussian.kl_sampling_bias`, convex in 1/n),
    ``kl_debiased`` with its s.e. at 1/n = 0, and the true KL."""
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.subplots()
    for i, r in enumerate(rows):
        color = f"C{i}"
        n_eff = [r[f"n_eff_f{round(100 * f)}"] for f in fractions]
        known = [n is not None and np.isfinite(n) and n > 0 for n in n_eff]
        # no effective n (the groups' covariances spread less than the KL's noise would
        # make them: chains that have not explored S): nothing to place on the axis
        inv = np.array([1 / n for n, k in zip(n_eff, known, strict=True) if k])
        kl = np.array(
            [r[f"kl_f{round(100 * f)}"] for f, k in zip(fractions, known, strict=True) if k]
        )
        ax.plot(inv, kl, "o", color=color, label=f"D = {r['dim']}: KL of the draws")
        deb = r.get("kl_debiased")
        if deb is not None and np.isfinite(deb) and inv.size:
            d = int(r["dim"])
            top = min(inv.max(), 1 / (d + 1))
            grid = np.linspace(0, top, 40)[1:]
            curve = [deb + kl_sampling_bias(1 / g, d) for g in grid]
            ax.plot(np.r_[0, grid], np.r_[deb, curve], "--", color=color)
            se = r.get("kl_debiased_se")
            ax.errorbar(
                [0],
                [deb],
                yerr=[se if se is not None and np.isfinite(se) else 0.0],
                fmt="s",
                color=color,
                capsize=3,
                label=f"D = {r['dim']}: debiased KL ± s.e.",
            )
        ax.axhline(r["kl_true"], color=color, lw=0.8, ls=":", label=f"D = {r['dim']}: true KL")
    ax.set_xlabel("1 / n_eff (the KL's effective n)")
    ax.set_ylabel("KL(q_diag || q_full), nats")
    right = ax.get_xlim()[1]
    ax.set_xlim(-0.03 * right, right)
    ax.legend(fontsize="small")
    return fig
