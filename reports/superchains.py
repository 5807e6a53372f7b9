r"""Nested R-hat of chains grouped in superchains (Margossian et al. 2024).

Many short chains started in groups (superchains: ChEES's ``init_fits`` blocks, each from its
own independent fit of ``init_from``) are judged by whether the superchains agree, not by
whether each chain has mixed on its own: :func:`max_rhat_nested` over any ``(chain, draw,
n)`` array (the predictions' class probabilities, as
:func:`reports.predictive.predictive_convergence` passes them), :func:`posterior_rhat_nested`
over a posterior's weights. Both are arviz-stats'
``rhat_nested`` (rank method), beside the split R-hat of :mod:`reports.diagnostics`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr
from arviz_stats.base import array_stats

from reports.diagnostics import posterior_dataset

__all__ = ["max_rhat_nested", "posterior_rhat_nested"]


def _equal_superchains(ids: Sequence[int]) -> np.ndarray:
    """Which chains to keep so that every superchain has as many chains as the smallest
    (arviz-stats' ``rhat_nested`` needs equal sizes): the first ones of each."""
    ids = np.asarray(ids, dtype=np.int64)
    smallest = min(int(np.count_nonzero(ids == k)) for k in np.unique(ids))
    keep = np.zeros(ids.size, dtype=bool)
    for k in np.unique(ids):
        keep[np.flatnonzero(ids == k)[:smallest]] = True
    return keep


def max_rhat_nested(
    values: np.ndarray, superchain_ids: Sequence[int] | None, *, finite_only: bool = False
) -> float | None:
    r"""Largest nested :math:`\hat R` (Margossian et al. 2024) over the columns of ``values``.

    Nested :math:`\hat R` compares superchains (groups of chains from the same start) rather
    than chains: :math:`\hat R_\nu = \sqrt{1 + \hat B_\nu / \hat W_\nu}`, with
    :math:`\hat B_\nu` the variance of the superchain means and :math:`\hat W_\nu` the mean
    within-superchain variance (the chains' means about their superchain's plus the
    within-chain variance), so many short chains can show convergence that no single chain
    does, and superchains that sit in different places fail it however well each mixes.
    Computed by arviz-stats' ``rhat_nested`` (rank-normalized and folded, split chains).

    Parameters
    ----------
    values : np.ndarray
        ``(chain, draw, n)`` draws of ``n`` scalar quantities.
    superchain_ids : sequence of int or None
        The superchain of each chain. Superchains of unequal size are cut to the smallest
        (the first chains of each), as arviz-stats needs equal sizes.
    finite_only : bool, default False
        False: NaN as soon as one quantity has no finite value (a quantity that never moved,
        as :func:`reports.diagnostics.diagnostic_gates` reads the weights). True: the
        largest finite value, None when none is finite (as :func:`reports.predictive.predictive_convergence` reads the
        predictions, where a probability every draw rounds to the same value has none).

    Returns
    -------
    float or None
        None (not applicable) without superchain ids or with fewer than two superchains.
    """
    if superchain_ids is None or len(set(superchain_ids)) < 2:
        return None
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 3 or v.shape[0] != len(superchain_ids):
        raise ValueError(
            f"values must be (chain, draw, n) with {len(superchain_ids)} chains, got {v.shape}"
        )
    keep = _equal_superchains(superchain_ids)
    _, ids = np.unique(np.asarray(superchain_ids)[keep], return_inverse=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.asarray(
            array_stats.rhat_nested(v[keep], ids, method="rank", chain_axis=0, draw_axis=1),
            dtype=float,
        ).ravel()
    if finite_only:
        r = r[np.isfinite(r)]
        return float(r.max()) if r.size else None
    if not r.size:
        return None
    return float(r.max()) if np.isfinite(r).all() else float("nan")


def posterior_rhat_nested(
    dt: xr.DataTree | xr.Dataset, superchain_ids: Sequence[int] | None
) -> float | None:
    """Largest nested R-hat of the posterior's scalar parameters (:func:`max_rhat_nested`):
    NaN when some parameter has none, None without two or more superchains."""
    ds = posterior_dataset(dt)
    columns = [
        da.transpose("chain", "draw", ...).values.reshape(ds.sizes["chain"], ds.sizes["draw"], -1)
        for da in ds.data_vars.values()
    ]
    return max_rhat_nested(np.concatenate(columns, axis=-1), superchain_ids)
