"""Trace and rank-ECDF plots of a posterior's worst-mixing parameters.

The trace of every chain and the rank-ECDF difference of every chain with a simultaneous 95%
band (Säilynoja, Bürkner & Vehtari 2022), which stays readable with many chains where rank
histograms overlap. The numbers come from :mod:`reports.diagnostics`.

Two engines draw them. Where arviz-plots 1.3 or later is installed (the ``plots`` extra on
Python 3.12+; it imports and draws with matplotlib 3.11), :func:`arviz_plots_figures` draws
ArviZ's own ``plot_trace_dist`` and ``plot_rank`` (the same simultaneous band) of the same
parameters. Elsewhere :func:`trace_rank_figure` draws them with matplotlib's object-oriented
API: arviz-plots 0.8, the last release for Python 3.11, does not import with matplotlib
3.11, and pinning matplotlib below 3.11 for two figure kinds would constrain every user's
environment.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from reports.diagnostics import posterior_dataset, posterior_summary, worst_params
from reports.draws import param_labels
from reports.rank_ecdf import ecdf_band, rank_ecdf_difference

__all__ = ["arviz_plots", "arviz_plots_figures", "trace_rank_figure"]

#: The first arviz-plots release whose trace and rank plots draw with matplotlib 3.11.
ARVIZ_PLOTS_MIN = (1, 3)

SAMPLE_DIMS = ("chain", "draw")


def _param_index(ds: xr.Dataset) -> dict[str, tuple[str, tuple]]:
    out = {}
    for name, da in ds.data_vars.items():
        shape = tuple(da.sizes[d] for d in da.dims if d not in SAMPLE_DIMS)
        for lab, i in zip(param_labels(str(name), shape), np.ndindex(*shape), strict=True):
            out[lab] = (str(name), i)
    return out


def arviz_plots() -> ModuleType | None:
    """arviz-plots when a release from :data:`ARVIZ_PLOTS_MIN` on imports here, else None."""
    try:
        azp = importlib.import_module("arviz_plots")
    except Exception:  # absent, or an old release that fails on this matplotlib
        return None
    try:
        version = tuple(int(x) for x in azp.__version__.split(".")[:2])
    except ValueError:
        return None
    return azp if version >= ARVIZ_PLOTS_MIN else None


def _picked(dt: xr.DataTree, n_params: int, params: Sequence[str] | None):
    if n_params < 1:
        raise ValueError(f"n_params must be at least 1, got {n_params}")
    ds = posterior_dataset(dt)
    summary = posterior_summary(ds)
    index = _param_index(ds)
    if params is None:
        return ds, summary, index, worst_params(summary, n_params)
    unknown = [p for p in params if p not in index]
    if unknown:
        raise KeyError(f"parameter(s) {unknown} not in the posterior")
    return ds, summary, index, list(params)


def arviz_plots_figures(
    dt: xr.DataTree, n_params: int = 4, *, params: Sequence[str] | None = None
) -> list[Figure]:
    """The worst-mixing parameters (as :func:`trace_rank_figure` picks them) drawn by
    arviz-plots: ``plot_trace_dist`` (each chain's density and trace) and ``plot_rank``
    (each chain's fractional-rank ECDF difference with ArviZ's simultaneous band).

    Returns
    -------
    list of matplotlib.figure.Figure
        The trace figure and the rank figure, closed in pyplot (they live only as long as
        the caller holds them).

    Raises
    ------
    RuntimeError
        When :func:`arviz_plots` finds no usable arviz-plots.
    """
    azp = arviz_plots()
    if azp is None:
        raise RuntimeError("arviz-plots >= 1.3 is not installed: pip install 'bnn-zoo[plots]'")
    import matplotlib.pyplot as plt

    ds, _, index, picked = _picked(dt, n_params, params)
    scalars = {}
    for label in picked:  # one variable per scalar parameter, named by its label
        name, i = index[label]
        da = ds[name].transpose("chain", "draw", ...)
        scalars[label] = (("chain", "draw"), np.asarray(da.values[(slice(None), slice(None), *i)]))
    tree = xr.DataTree.from_dict({"posterior": xr.Dataset(scalars)})
    figs = []
    for plot in (azp.plot_trace_dist, azp.plot_rank):
        pc = plot(tree, backend="matplotlib")
        fig = pc.viz["figure"].item()
        plt.close(fig)
        figs.append(fig)
    return figs


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
    ds, summary, index, picked = _picked(dt, n_params, params)
    n_chains, n_draws = int(ds.sizes["chain"]), int(ds.sizes["draw"])
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
