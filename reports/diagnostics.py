r"""MCMC convergence diagnostics of a stored posterior: summary table, gates, rank ECDFs.

The numbers come from arviz-stats on the DataTree's ``posterior`` group: rank-normalized
bulk and tail effective sample sizes and the rank-normalized split :math:`\hat R`
(Vehtari et al. 2021). :math:`\hat R` compares chains, so with one chain (a variational
posterior or a single NUTS chain) it is reported as missing and never gates.

Gates (defaults follow Vehtari et al. and Stan's ``diagnose``):

- ``r_hat``: every :math:`\hat R \le 1.01` (two or more chains). A non-finite
  :math:`\hat R` fails: arviz-stats gives NaN or inf for a parameter that does not move
  within its chains, i.e. a sampler that never moved;
- ``ess_bulk``: every bulk ESS :math:`\ge 100`; a parameter whose draws are constant within
  every chain fails (arviz-stats would give it a full ESS, its ranks being all tied);
- ``divergences``: no divergent transition (``sample_stats.diverging``);
- ``tree_depth``: no NUTS transition at the maximum tree depth. As Stan counts them, a
  transition hit the limit when its ``tree_depth`` reached ``max_tree_depth`` (its
  trajectory was cut at :math:`2^D - 1` leapfrog steps before it could make a U-turn).
  This is about efficiency rather than validity, and a sign of a badly adapted step size or
  mass matrix, or of strong correlations.

With chains in superchains (groups from the same independent start: ChEES's ``init_fits``
blocks), :mod:`reports.superchains` gives the nested :math:`\hat R` of Margossian et al.
(2024), arviz-stats' ``rhat_nested`` with the rank method, beside the split one.

The same diagnostics of the predictions (chains can agree on the function while weights do
not mix) are :func:`reports.predictive.predictive_convergence`; the rank-ECDF test of mixing
is :mod:`reports.rank_ecdf`, and the figure of the worst-mixing parameters
:func:`reports.figures.diagnostics.trace_rank_figure`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import arviz_stats as azs
import numpy as np
import pandas as pd
import xarray as xr

from reports.draws import param_labels

__all__ = [
    "Diagnostics",
    "diagnostic_gates",
    "posterior_dataset",
    "posterior_summary",
    "tree_depth_hits",
    "worst_params",
]

_SAMPLE_DIMS = ("chain", "draw")
_N_WORST = 5
#: Names of the per-transition tree depth in ``sample_stats`` (ours and arviz-base's
#: NumPyro converter first, then Stan's and PyMC's).
_TREE_DEPTH_NAMES = ("tree_depth", "treedepth__", "treedepth", "depth")
#: Names of the per-transition number of leapfrog steps (used when no tree depth is stored).
_N_STEPS_NAMES = ("n_steps", "num_steps", "n_leapfrog__", "n_leapfrog")


def posterior_dataset(dt: xr.DataTree | xr.Dataset) -> xr.Dataset:
    """The ``posterior`` group of a tree as a Dataset with ``chain`` and ``draw`` dims."""
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
    ds = posterior_dataset(dt)
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
        Largest :math:`\\hat R` (NaN when some parameter has no finite one); ``None`` with
        fewer than two chains.
    min_ess_bulk, min_ess_tail : float
        Smallest bulk and tail ESS over all parameters (NaN when some are not finite).
    ess_bulk_quantiles : tuple of float
        5%, 50% and 95% quantiles of the finite bulk ESS over parameters.
    r_hat_quantiles : tuple of float or None
        Same for :math:`\\hat R`; ``None`` with fewer than two chains.
    worst_r_hat : tuple of (str, float)
        Up to five parameters with the largest :math:`\\hat R`, non-finite ones first (empty
        with one chain).
    worst_ess_bulk : tuple of (str, float)
        Up to five parameters with the smallest bulk ESS, non-finite ones first.
    n_nonfinite_r_hat, n_nonfinite_ess : int
        Parameters whose :math:`\\hat R` (two or more chains) or bulk ESS is NaN or inf.
    n_divergent : int or None
        Divergent transitions (``sample_stats.diverging``); ``None`` when not recorded.
    n_transitions : int
        Transitions after warm-up: chains times draws.
    max_tree_depth : int or None
        The sampler's tree-depth limit, when known.
    n_max_tree_depth : int or None
        Transitions whose tree depth reached ``max_tree_depth``; ``None`` when the tree
        depth or its limit is not recorded (HMC, variational draws).
    failed : tuple of str
        Names of the failed gates: ``"r_hat"``, ``"ess_bulk"``, ``"divergences"``,
        ``"tree_depth"``.
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
    n_nonfinite_r_hat: int = 0
    n_nonfinite_ess: int = 0
    n_transitions: int = 0
    max_tree_depth: int | None = None
    n_max_tree_depth: int | None = None

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
    x = x[np.isfinite(x)]
    if not x.size:
        return (float("nan"),) * 3
    q = np.quantile(x, [0.05, 0.5, 0.95])
    return (float(q[0]), float(q[1]), float(q[2]))


def _extreme(x: np.ndarray, largest: bool) -> float:
    """Largest (or smallest) value, NaN as soon as one value is not finite."""
    if not np.all(np.isfinite(x)):
        return float("nan")
    return float(np.max(x) if largest else np.min(x))


def _worst(summary: pd.DataFrame, column: str, largest: bool) -> tuple[tuple[str, float], ...]:
    """Up to five worst parameters by ``column``; non-finite values count as the worst."""
    col = summary[column].astype(float)
    key = col.where(np.isfinite(col), np.inf if largest else -np.inf)
    order = key.sort_values(ascending=not largest, kind="stable").index[:_N_WORST]
    return tuple((str(k), float(col[k])) for k in order)


def _stat(dt: Any, names: Sequence[str]) -> np.ndarray | None:
    """The first of ``names`` found in ``dt.sample_stats``, as an array, or None."""
    if not isinstance(dt, xr.DataTree) or "sample_stats" not in dt.children:
        return None
    stats = dt["sample_stats"]
    for name in names:
        if name in stats.data_vars:
            return np.asarray(stats[name].values)
    return None


def _settings_max_tree_depth(dt: Any) -> int | None:
    """``max_tree_depth`` from the tree's attributes (root ``settings``, or sample_stats)."""
    if not isinstance(dt, xr.DataTree):
        return None
    places = [dt.attrs.get("settings"), dt.attrs]
    if "sample_stats" in dt.children:
        places.append(dt["sample_stats"].attrs)
    for place in places:
        if isinstance(place, str):
            try:
                place = json.loads(place)
            except ValueError:
                continue
        if isinstance(place, dict) and place.get("max_tree_depth") is not None:
            try:
                return int(place["max_tree_depth"])
            except (TypeError, ValueError):
                continue
    return None


def tree_depth_hits(dt: xr.DataTree, max_tree_depth: int | None = None) -> tuple[int, int] | None:
    """How many transitions reached the maximum tree depth, of how many.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree whose ``sample_stats`` holds the per-transition ``tree_depth`` (or, failing
        that, the leapfrog steps ``n_steps``).
    max_tree_depth : int, optional
        The sampler's limit :math:`D`; by default read from the tree's ``settings``
        attribute (as the run stores it) or ``sample_stats.attrs``.

    Returns
    -------
    tuple of (int, int) or None
        ``(hits, transitions)``: transitions with ``tree_depth >= D`` (Stan's count; from
        the steps alone, ``n_steps >= 2**D - 1``). None when the stats or :math:`D` are not
        recorded (HMC has no tree depth).
    """
    depth_limit = max_tree_depth if max_tree_depth is not None else _settings_max_tree_depth(dt)
    if depth_limit is None:
        return None
    depth = _stat(dt, _TREE_DEPTH_NAMES)
    if depth is not None:
        return int(np.count_nonzero(depth >= depth_limit)), int(depth.size)
    steps = _stat(dt, _N_STEPS_NAMES)
    if steps is not None:
        return int(np.count_nonzero(steps >= 2**depth_limit - 1)), int(steps.size)
    return None


def diagnostic_gates(
    dt: xr.DataTree,
    *,
    r_hat_max: float = 1.01,
    ess_min: float = 100,
    max_tree_depth: int | None = None,
) -> Diagnostics:
    """Check a posterior against the :math:`\\hat R`, ESS, divergence and tree-depth gates.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree with a ``posterior`` group and optionally ``sample_stats`` (``diverging``,
        ``tree_depth``).
    r_hat_max : float, default 1.01
        Fail when any :math:`\\hat R` exceeds it or is not finite (two or more chains).
    ess_min : float, default 100
        Fail when any bulk ESS is below it or is not finite.
    max_tree_depth : int, optional
        The NUTS tree-depth limit; by default read from the tree (:func:`tree_depth_hits`).
        Fail when any transition reached it.

    Returns
    -------
    Diagnostics
        The extremes are NaN when some parameter's statistic is not finite; the quantiles
        are over the finite values.
    """
    ds = posterior_dataset(dt)
    summary = _moved_summary(ds)
    n_chains, n_draws = int(ds.sizes["chain"]), int(ds.sizes["draw"])
    rhat = summary["r_hat"].to_numpy(dtype=float)
    multi = n_chains >= 2
    ess_bulk = summary["ess_bulk"].to_numpy(dtype=float)

    diverging = _stat(dt, ("diverging", "diverging__"))
    n_divergent = None if diverging is None else int(np.count_nonzero(diverging))
    hits = tree_depth_hits(dt, max_tree_depth) if isinstance(dt, xr.DataTree) else None
    depth_limit = max_tree_depth if max_tree_depth is not None else _settings_max_tree_depth(dt)

    n_params = len(summary)
    max_r_hat = _extreme(rhat, largest=True) if multi else None
    worst_r_hat = _worst(summary, "r_hat", largest=True) if multi else ()
    worst_ess = _worst(summary, "ess_bulk", largest=False)
    min_ess_bulk = _extreme(ess_bulk, largest=False)
    n_nonfinite_r_hat = int((~np.isfinite(rhat)).sum()) if multi else 0
    n_nonfinite_ess = int((~np.isfinite(ess_bulk)).sum())
    lines = {
        "r_hat": _rhat_line(rhat, r_hat_max, worst_r_hat, n_nonfinite_r_hat) if multi else None,
        "ess_bulk": _ess_line(ess_bulk, ess_min, worst_ess, n_nonfinite_ess),
        **_sampler_lines(n_divergent, n_chains * n_draws, hits, depth_limit),
    }
    failed = [gate for gate, line in lines.items() if line is not None]
    messages = [line for line in lines.values() if line is not None]

    return Diagnostics(
        n_chains=n_chains,
        n_draws=n_draws,
        n_params=n_params,
        max_r_hat=max_r_hat,
        min_ess_bulk=min_ess_bulk,
        min_ess_tail=_extreme(summary["ess_tail"].to_numpy(dtype=float), largest=False),
        ess_bulk_quantiles=_quantiles(ess_bulk),
        r_hat_quantiles=_quantiles(rhat) if multi else None,
        worst_r_hat=worst_r_hat,
        worst_ess_bulk=worst_ess,
        n_divergent=n_divergent,
        failed=tuple(failed),
        messages=tuple(messages),
        r_hat_max=float(r_hat_max),
        ess_min=float(ess_min),
        n_nonfinite_r_hat=n_nonfinite_r_hat,
        n_nonfinite_ess=n_nonfinite_ess,
        n_transitions=n_chains * n_draws,
        max_tree_depth=depth_limit if hits is not None else None,
        n_max_tree_depth=hits[0] if hits is not None else None,
    )


def _moved_summary(ds: xr.Dataset) -> pd.DataFrame:
    """The posterior summary, with the ESS of a parameter that never moved within any chain
    set to NaN: arviz-stats gives it a NaN or inf r_hat but a full ESS (its ranks are all
    tied)."""
    summary = posterior_summary(ds)
    _, spread = _flatten(ds, (ds.max(dim="draw") - ds.min(dim="draw")).max(dim="chain"))
    summary.loc[~(spread > 0), ["ess_bulk", "ess_tail"]] = np.nan
    return summary


def _sampler_lines(
    n_divergent: int | None, n_transitions: int, hits: tuple | None, depth_limit: Any
) -> dict[str, str | None]:
    """The divergence and tree-depth gates' failure messages (None where they pass)."""
    div = f"divergences: {n_divergent} of {n_transitions} transitions" if n_divergent else None
    depth = None
    if hits is not None and hits[0] > 0:
        depth = f"tree_depth: {hits[0]} of {hits[1]} transitions hit max_tree_depth ({depth_limit})"
    return {"divergences": div, "tree_depth": depth}


def _rhat_line(rhat: np.ndarray, r_hat_max: float, worst: tuple, n_nonfinite: int) -> str | None:
    """The R-hat gate's failure message, or None when every R-hat passes."""
    with np.errstate(invalid="ignore"):
        n_bad = int(np.sum(~np.isfinite(rhat) | (rhat > r_hat_max)))
    if not n_bad:
        return None
    line = (
        f"r_hat: {n_bad} of {len(rhat)} parameters above {r_hat_max} or not finite "
        f"(worst {worst[0][1]:.4g} at {worst[0][0]})"
    )
    if n_nonfinite:
        line += (
            f"; {n_nonfinite} have no finite r_hat: they did not move "
            "within their chains (a sampler that never moved)"
        )
    return line


def _ess_line(ess_bulk: np.ndarray, ess_min: float, worst: tuple, n_nonfinite: int) -> str | None:
    """The bulk-ESS gate's failure message, or None when every ESS passes."""
    with np.errstate(invalid="ignore"):
        n_bad = int(np.sum(~np.isfinite(ess_bulk) | (ess_bulk < ess_min)))
    if not n_bad:
        return None
    line = (
        f"ess_bulk: {n_bad} of {len(ess_bulk)} parameters below {ess_min:g} or not finite "
        f"(worst {worst[0][1]:.4g} at {worst[0][0]})"
    )
    if n_nonfinite:
        line += f"; {n_nonfinite} never moved within any chain (constant draws)"
    return line


# --------------------------------------------------------------------------- plots


def worst_params(summary: pd.DataFrame, n: int) -> list[str]:
    """Labels of the ``n`` worst-mixing parameters of a :func:`posterior_summary`.

    With :math:`\\hat R` (two or more chains) the largest :math:`\\hat R` first, else the
    smallest bulk ESS first; non-finite values count as the worst, ties go to the smaller
    ESS.

    Parameters
    ----------
    summary : pandas.DataFrame
        Output of :func:`posterior_summary`.
    n : int
        How many labels.

    Returns
    -------
    list of str
    """
    rhat = summary["r_hat"].astype(float)
    ess = summary["ess_bulk"].astype(float)
    # one chain: every r_hat is NaN, so all tie and the ESS decides
    rhat_key = rhat.where(np.isfinite(rhat), np.inf).to_numpy()
    ess_key = ess.where(np.isfinite(ess), -np.inf).to_numpy()
    order = np.lexsort((ess_key, -rhat_key))
    return [str(summary.index[i]) for i in order[:n]]
