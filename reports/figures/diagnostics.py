"""Trace and rank-ECDF plots of a posterior's worst-mixing parameters.

The trace of every chain and the rank-ECDF difference of every chain with a simultaneous 95%
band (Säilynoja, Bürkner & Vehtari 2022), which stays readable with many chains where rank
histograms overlap. Drawn with matplotlib's object-oriented API: arviz-plots 0.8 does not
import with matplotlib 3.11, and pinning matplotlib below 3.11 for two figure kinds would
constrain every user's environment. The numbers come from :mod:`reports.diagnostics`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from reports.diagnostics import posterior_dataset, posterior_summary, worst_params
from reports.draws import param_labels
from reports.rank_ecdf import ecdf_band, rank_ecdf_difference

__all__ = ["trace_rank_figure"]

SAMPLE_DIMS = ("chain", "draw")


def _param_index(ds: xr.Dataset) -> dict[str, tuple[str, tuple]]:
    out = {}
    for name, da in ds.data_vars.items():
        shape = tuple(da.sizes[d] for d in da.dims if d not in SAMPLE_DIMS)
        for lab, i in zip(param_labels(str(name), shape), np.ndindex(*shape), strict=True):
            out[lab] = (str(name), i)
    return out


def trace_rank_figure(
    dt: xr.DataTree, n_params: int = 4, *, params: Sequence[str] | None = None
) -> Figure:
    """Trace plots and rank-ECDF differences of the worst-mixing parameters.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree with a ``posterior`` group.
    n_params : int, default 4
        Number of scalar parameters (rows), the worst-mixing ones (:func:`worst_params`).
    params : sequence of str, optional
        Labels (``layer0.weight[1,0]``) to draw instead.

    Returns
    -------
    matplotlib.figure.Figure
        One row per parameter, titled with its :math:`\\hat R` and bulk ESS: the trace of
        every chain (left) and each chain's rank-ECDF difference (right;
        :func:`rank_ecdf_difference`) with the simultaneous 95% band of mixed chains
        (:func:`ecdf_band`, grey).
    """
    if n_params < 1:
        raise ValueError(f"n_params must be at least 1, got {n_params}")
    ds = posterior_dataset(dt)
    summary = posterior_summary(ds)
    n_chains, n_draws = int(ds.sizes["chain"]), int(ds.sizes["draw"])
    index = _param_index(ds)
    if params is None:
        picked = worst_params(summary, n_params)
    else:
        unknown = [p for p in params if p not in index]
        if unknown:
            raise KeyError(f"parameter(s) {unknown} not in the posterior")
        picked = list(params)
    n_grid = int(min(50, max(5, n_draws)))
    grid = np.arange(1, n_grid + 1) / (n_grid + 1)
    lower, upper = ecdf_band(n_draws, grid)
    fig = Figure(figsize=(10, 2.1 * len(picked) + 0.8), layout="constrained")
    axes = fig.subplots(len(picked), 2, squeeze=False)
    colors = [f"C{c % 10}" for c in range(n_chains)]
    for row, label in enumerate(picked):
        name, i = index[label]
        da = ds[name].transpose("chain", "draw", ...)
        values = np.asarray(da.values[(slice(None), slice(None), *i)], dtype=float)
        ax_t, ax_r = axes[row]
        for c in range(n_chains):
            ax_t.plot(values[c], lw=0.6, alpha=0.8, color=colors[c], label=f"chain {c}")
        rh, ess = summary.loc[label, "r_hat"], summary.loc[label, "ess_bulk"]
        stat = f"ESS {ess:.3g}" if n_chains < 2 else f"R-hat {rh:.3g}, ESS {ess:.3g}"
        ax_t.set_title(f"{label}: {stat}", fontsize=9, loc="left")
        ax_t.set_ylabel("value", fontsize=8)
        _, diff = rank_ecdf_difference(values, n_grid)
        ax_r.fill_between(
            grid, lower - grid, upper - grid, color="0.85", lw=0, label="95% band of mixed chains"
        )
        for c in range(n_chains):
            ax_r.plot(grid, diff[c], color=colors[c], lw=1.0)
        ax_r.axhline(0.0, color="0.4", lw=0.6)
        ax_r.set_ylabel("ECDF - uniform", fontsize=8)
    axes[-1, 0].set_xlabel("draw (after warm-up)")
    axes[-1, 1].set_xlabel("fractional rank among all chains' draws")
    axes[0, 1].set_title("rank ECDF difference per chain", fontsize=9)
    axes[0, 1].legend(fontsize=7, loc="upper right")
    if 1 < n_chains <= 8:
        axes[0, 0].legend(fontsize=7, loc="upper right", ncols=min(n_chains, 4))
    return fig
