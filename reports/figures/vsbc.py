"""Histograms of VSBC p-values, one row per fit and one panel per parameter site.

Variational simulation-based calibration (Yao, Vehtari, Simpson & Gelman 2018): q's
marginal CDF at the true parameter, over replications with data simulated from the prior.
An exact posterior gives flat histograms; a U shape is a q too narrow, a hump a q too wide,
a slope a biased q. The p-values are computed in :mod:`guides.checks`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

__all__ = ["vsbc_histograms"]


def vsbc_histograms(
    pvalues: Mapping[str, Mapping[str, np.ndarray]],
    *,
    bins: int = 10,
    panel_size: float = 2.4,
    title: str | None = None,
) -> Figure:
    """One row per fit (``{row label: {site: p-values}}``), one histogram per site.

    Each panel pools the p-values of every coordinate of its site over the replications,
    as a density on [0, 1] with the uniform's density 1 dashed; its title says how many
    values it holds. The Figure is returned, not saved.
    """
    if not pvalues or not all(pvalues.values()):
        raise ValueError("pvalues must hold at least one {row: {site: p-values}} with a site")
    sites = list(dict.fromkeys(s for row in pvalues.values() for s in row))
    fig = Figure(
        figsize=(panel_size * len(sites) + 0.6, panel_size * len(pvalues) + 0.4),
        layout="constrained",
    )
    axes = fig.subplots(len(pvalues), len(sites), squeeze=False)
    edges = np.linspace(0.0, 1.0, bins + 1)
    for i, (label, row) in enumerate(pvalues.items()):
        for j, site in enumerate(sites):
            ax = axes[i, j]
            p = np.asarray(row.get(site, []), dtype=float).ravel()
            if p.size:
                ax.hist(p, bins=edges, density=True, color="tab:blue", alpha=0.8)
            ax.axhline(1.0, color="black", linestyle="--", linewidth=1)
            ax.set_xlim(0.0, 1.0)
            ax.set_title(f"{site} ({p.size} values)", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{label}\ndensity", fontsize=8)
            if i == len(pvalues) - 1:
                ax.set_xlabel("p = q's CDF at the true value", fontsize=8)
            ax.tick_params(labelsize=7)
    if title is not None:
        fig.suptitle(title)
    return fig
