r"""MCMC convergence diagnostics of a stored posterior: summary table, gates and plots.

The numbers come from arviz-stats on the DataTree's ``posterior`` group: rank-normalized
bulk and tail effective sample sizes and the rank-normalized split :math:`\hat R`
(Vehtari et al. 2021). :math:`\hat R` compares chains, so with one chain (a variational
posterior or a single NUTS chain) it is reported as missing and never gates.

Gates (defaults follow Vehtari et al.): every :math:`\hat R \le 1.01` (two or more chains),
every bulk ESS :math:`\ge 100`, and no divergent transition.

Trace and rank plots are drawn with matplotlib's object-oriented API (arviz-plots does not
work with this environment's matplotlib/xarray); the figure is returned, never saved here
(:mod:`reports.render` renders them to PNG bytes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import arviz_stats as azs
import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure
from scipy.stats import rankdata

from reports.draws import param_labels

__all__ = ["Diagnostics", "posterior_summary", "diagnostic_gates", "trace_rank_figure"]

_SAMPLE_DIMS = ("chain", "draw")
_N_WORST = 5


def _posterior(dt: xr.DataTree | xr.Dataset) -> xr.Dataset:
    if isinstance(dt, xr.Dataset):
        return dt
    if "posterior" not in dt.children:
        raise ValueError(f"the DataTree has no posterior group (groups: {list(dt.children)})")
    ds = dt["posterior"].to_dataset()
    missing = [d for d in _SAMPLE_DIMS if d not in ds.dims]
    if missing or not ds.data_vars:
        raise ValueError(f"the posterior group needs variables with dims {_SAMPLE_DIMS}")
    return ds


def _flatten(ds: xr.Dataset, stat: xr.Dataset) -> tuple[list[str], np.ndarray]:
    labels, values = [], []
    for name, da in ds.data_vars.items():
        event = [d for d in da.dims if d not in _SAMPLE_DIMS]
        arr = stat[name].transpose(*event).values
        labels.extend(param_labels(str(name), arr.shape))
        values.append(np.ravel(arr))
    return labels, np.concatenate(values).astype(float)


def posterior_summary(dt: xr.DataTree | xr.Dataset) -> pd.DataFrame:
    """Per-parameter mean, sd, bulk/tail ESS and :math:`\\hat R` of the posterior.

    Parameters
    ----------
    dt : xarray.DataTree or xarray.Dataset
        A tree with a ``posterior`` group (or that group as a Dataset) with
        ``(chain, draw)`` sample dimensions.

    Returns
    -------
    pandas.DataFrame
        One row per scalar parameter, indexed by labels such as ``layer1.weight[3,0]``;
        columns ``mean``, ``sd`` (``ddof=0`` over all draws), ``ess_bulk``, ``ess_tail``
        and ``r_hat`` (NaN with one chain, or for a constant parameter), unrounded.
    """
    ds = _posterior(dt)
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = {
            "mean": ds.mean(dim=_SAMPLE_DIMS),
            "sd": ds.std(dim=_SAMPLE_DIMS),
            "ess_bulk": azs.ess(ds, method="bulk"),
            "ess_tail": azs.ess(ds, method="tail"),
            "r_hat": azs.rhat(ds),
        }
    columns = {}
    labels: list[str] = []
    for key, value in stats.items():
        labels, columns[key] = _flatten(ds, value)
    return pd.DataFrame(columns, index=pd.Index(labels, name="parameter"))


@dataclass(frozen=True)
class Diagnostics:
    """Convergence summary of a posterior and the gates it failed.

    Attributes
    ----------
    n_chains, n_draws, n_params : int
        Posterior size: chains, draws per chain, scalar parameters.
    max_r_hat : float or None
        Largest :math:`\\hat R`; ``None`` with fewer than two chains.
    min_ess_bulk, min_ess_tail : float
        Smallest bulk and tail ESS over all parameters.
    ess_bulk_quantiles : tuple of float
        5%, 50% and 95% quantiles of the bulk ESS over parameters.
    r_hat_quantiles : tuple of float or None
        Same for :math:`\\hat R`; ``None`` with fewer than two chains.
    worst_r_hat : tuple of (str, float)
        Up to five parameters with the largest :math:`\\hat R` (empty with one chain).
    worst_ess_bulk : tuple of (str, float)
        Up to five parameters with the smallest bulk ESS.
    n_divergent : int or None
        Divergent transitions (``sample_stats.diverging``); ``None`` when not recorded.
    failed : tuple of str
        Names of the failed gates: ``"r_hat"``, ``"ess_bulk"``, ``"divergences"``.
    messages : tuple of str
        One human-readable line per failed gate.
    r_hat_max, ess_min : float
        The thresholds used.
    """

    n_chains: int
    n_draws: int
    n_params: int
    max_r_hat: float | None
    min_ess_bulk: float
    min_ess_tail: float
    ess_bulk_quantiles: tuple[float, float, float]
    r_hat_quantiles: tuple[float, float, float] | None
    worst_r_hat: tuple[tuple[str, float], ...]
    worst_ess_bulk: tuple[tuple[str, float], ...]
    n_divergent: int | None
    failed: tuple[str, ...]
    messages: tuple[str, ...]
    r_hat_max: float
    ess_min: float

    @property
    def passed(self) -> bool:
        """Whether every gate passed."""
        return not self.failed

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (tuples become lists, worst parameters ``{label: value}``)."""
        out = asdict(self)
        for key in ("worst_r_hat", "worst_ess_bulk"):
            out[key] = {label: value for label, value in getattr(self, key)}
        for key in ("ess_bulk_quantiles", "r_hat_quantiles", "failed", "messages"):
            out[key] = None if out[key] is None else list(out[key])
        out["passed"] = self.passed
        return out


def _quantiles(x: np.ndarray) -> tuple[float, float, float]:
    q = np.nanquantile(x, [0.05, 0.5, 0.95])
    return (float(q[0]), float(q[1]), float(q[2]))


def _worst(summary: pd.DataFrame, column: str, largest: bool) -> tuple[tuple[str, float], ...]:
    col = summary[column].dropna()
    picked = col.nlargest(_N_WORST) if largest else col.nsmallest(_N_WORST)
    return tuple((str(k), float(v)) for k, v in picked.items())


def diagnostic_gates(
    dt: xr.DataTree, *, r_hat_max: float = 1.01, ess_min: float = 100
) -> Diagnostics:
    """Check a posterior against the :math:`\\hat R`, ESS and divergence gates.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree with a ``posterior`` group and optionally ``sample_stats.diverging``.
    r_hat_max : float, default 1.01
        Fail when any :math:`\\hat R` exceeds it (only with two or more chains).
    ess_min : float, default 100
        Fail when any bulk ESS is below it.

    Returns
    -------
    Diagnostics
        NaN statistics (constant parameters) are ignored by the extremes and quantiles.
    """
    ds = _posterior(dt)
    summary = posterior_summary(ds)
    n_chains, n_draws = int(ds.sizes["chain"]), int(ds.sizes["draw"])
    rhat = summary["r_hat"].to_numpy()
    multi = n_chains >= 2 and bool(np.any(np.isfinite(rhat)))
    ess_bulk = summary["ess_bulk"].to_numpy()

    n_divergent = None
    if isinstance(dt, xr.DataTree) and "sample_stats" in dt.children:
        stats = dt["sample_stats"]
        if "diverging" in stats.data_vars:
            n_divergent = int(np.count_nonzero(stats["diverging"].values))

    failed, messages = [], []
    max_r_hat = float(np.nanmax(rhat)) if multi else None
    worst_r_hat = _worst(summary, "r_hat", largest=True) if multi else ()
    worst_ess = _worst(summary, "ess_bulk", largest=False)
    min_ess_bulk = float(np.nanmin(ess_bulk))
    if max_r_hat is not None and max_r_hat > r_hat_max:
        failed.append("r_hat")
        n_bad = int(np.sum(rhat > r_hat_max))
        messages.append(
            f"r_hat: {n_bad} of {len(rhat)} parameters above {r_hat_max} "
            f"(max {max_r_hat:.4g} at {worst_r_hat[0][0]})"
        )
    if min_ess_bulk < ess_min:
        failed.append("ess_bulk")
        n_bad = int(np.sum(ess_bulk < ess_min))
        messages.append(
            f"ess_bulk: {n_bad} of {len(ess_bulk)} parameters below {ess_min} "
            f"(min {min_ess_bulk:.4g} at {worst_ess[0][0]})"
        )
    if n_divergent:
        failed.append("divergences")
        messages.append(f"divergences: {n_divergent} of {n_chains * n_draws} transitions")

    return Diagnostics(
        n_chains=n_chains,
        n_draws=n_draws,
        n_params=len(summary),
        max_r_hat=max_r_hat,
        min_ess_bulk=min_ess_bulk,
        min_ess_tail=float(np.nanmin(summary["ess_tail"].to_numpy())),
        ess_bulk_quantiles=_quantiles(ess_bulk),
        r_hat_quantiles=_quantiles(rhat) if multi else None,
        worst_r_hat=worst_r_hat,
        worst_ess_bulk=worst_ess,
        n_divergent=n_divergent,
        failed=tuple(failed),
        messages=tuple(messages),
        r_hat_max=float(r_hat_max),
        ess_min=float(ess_min),
    )


def _pick_params(ds: xr.Dataset, n_params: int, seed: int) -> list[tuple[str, str, tuple]]:
    """Seeded choice of scalar parameters, weights preferred: (variable, label, index)."""
    entries = []
    for name, da in ds.data_vars.items():
        shape = tuple(da.sizes[d] for d in da.dims if d not in _SAMPLE_DIMS)
        labels = param_labels(str(name), shape)
        entries.extend(
            (str(name), lab, i) for lab, i in zip(labels, np.ndindex(*shape), strict=True)
        )
    weights = [e for e in entries if e[0].endswith(".weight")]
    pool = weights if len(weights) >= n_params else entries
    n = min(n_params, len(pool))
    chosen = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return [pool[i] for i in sorted(chosen)]


def trace_rank_figure(dt: xr.DataTree, n_params: int = 4, seed: int = 0) -> Figure:
    """Trace plots and rank histograms of a few randomly chosen parameters.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree with a ``posterior`` group.
    n_params : int, default 4
        Number of scalar parameters (rows); weights (``*.weight`` sites) are preferred.
    seed : int, default 0
        Seed of the parameter choice.

    Returns
    -------
    matplotlib.figure.Figure
        One row per parameter: the trace of every chain (left) and the histogram of each
        chain's ranks within the pooled draws (right; flat near ``draws / bins`` when the
        chains mix, dashed line).
    """
    if n_params < 1:
        raise ValueError(f"n_params must be at least 1, got {n_params}")
    ds = _posterior(dt)
    picked = _pick_params(ds, n_params, seed)
    n_chains, n_draws = int(ds.sizes["chain"]), int(ds.sizes["draw"])
    n_bins = int(max(1, min(20, n_draws // 5)))
    fig = Figure(figsize=(10, 2.0 * len(picked) + 0.6), layout="constrained")
    axes = fig.subplots(len(picked), 2, squeeze=False)
    colors = [f"C{c % 10}" for c in range(n_chains)]
    for row, (name, label, index) in enumerate(picked):
        da = ds[name].transpose("chain", "draw", ...)
        values = np.asarray(da.values[(slice(None), slice(None), *index)], dtype=float)
        ax_t, ax_r = axes[row]
        for c in range(n_chains):
            ax_t.plot(values[c], lw=0.6, alpha=0.8, color=colors[c], label=f"chain {c}")
        ax_t.set_ylabel(label, fontsize=8)
        ranks = rankdata(values.ravel()).reshape(values.shape)
        edges = np.linspace(0.5, values.size + 0.5, n_bins + 1)
        for c in range(n_chains):
            counts, _ = np.histogram(ranks[c], bins=edges)
            ax_r.stairs(counts, edges, baseline=None, color=colors[c], lw=1.0)
        ax_r.axhline(n_draws / n_bins, color="0.4", ls="--", lw=0.8)
        ax_r.set_ylim(bottom=0)
        ax_r.set_yticks([])
    axes[0, 0].set_title("trace")
    axes[0, 1].set_title("rank histogram per chain")
    axes[-1, 0].set_xlabel("draw")
    axes[-1, 1].set_xlabel("rank among all draws")
    if n_chains > 1:
        axes[0, 0].legend(fontsize=7, loc="upper right", ncols=min(n_chains, 4))
    return fig
