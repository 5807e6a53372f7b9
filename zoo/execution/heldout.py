"""The test-set log predictive density of a cell's tree (:func:`heldout_lpd`).

The held-out counterpart of ``arviz_stats.loo(dt)``: it reads the ``log_likelihood_test``
group, which nothing in arviz-stats reads (see :mod:`zoo.execution.arviz_io`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import xarray as xr

__all__ = ["HeldOut", "heldout_lpd"]


class HeldOut(NamedTuple):
    """The test-set log predictive density of a tree (:func:`heldout_lpd`).

    Attributes
    ----------
    lpd : float
        ``sum_j log mean_s p(y*_j | x*_j, theta_s)`` over the test points, in nats.
    se : float
        Its standard error over test points, ``sqrt(n) * sd_j(lpd_j)``.
    n : int
        Number of test points.
    pointwise : np.ndarray
        ``lpd_j``, shape ``(n,)``.
    """

    lpd: float
    se: float
    n: int
    pointwise: np.ndarray


def heldout_lpd(dt: xr.DataTree) -> HeldOut:
    """Test-set log predictive density from the ``log_likelihood_test`` group.

    The held-out counterpart of ``arviz_stats.loo(dt).elpd`` (which estimates the same sum
    for the training points by leave-one-out): the log of the posterior predictive density
    at each test point, averaged over all ``chain x draw`` draws, summed over points.

    Parameters
    ----------
    dt : xarray.DataTree
        A cell's tree with a ``log_likelihood_test`` group.

    Returns
    -------
    HeldOut
        ``lpd``, its standard error, the number of test points and the pointwise values.

    Raises
    ------
    KeyError
        If the tree has no ``log_likelihood_test`` group.
    """
    if "log_likelihood_test" not in dt.children:
        raise KeyError(
            "the tree has no 'log_likelihood_test' group (a cell file of an older bnn-zoo "
            "stores the test log-likelihood in 'log_likelihood'; rerun the cell)"
        )
    ll = dt["log_likelihood_test"]["y"].transpose("chain", "draw", ...).values
    ll = ll.reshape(-1, ll.shape[-1]).astype(np.float64)
    m = ll.max(0)
    pointwise = m + np.log(np.mean(np.exp(ll - m), 0))
    n = pointwise.size
    se = float(np.sqrt(n) * pointwise.std(ddof=1)) if n > 1 else float("nan")
    return HeldOut(float(pointwise.sum()), se, n, pointwise)
