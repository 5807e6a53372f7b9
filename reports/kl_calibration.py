r"""The KL's sampling bias calibrated on AR(1) chains matched to the draws (indirect inference).

:func:`ar1_calibrated_bias` (its docstring has the argument) undoes the shortfall of
:func:`reports.kl_groups.kl_bias_n` on autocorrelated chains; :mod:`reports.kl_reference`
uses it when asked to calibrate. NumPy and SciPy only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.signal import lfilter

from reports.gaussian import kl_diag_full
from reports.kl_groups import group_moments, kl_bias_n, merge_groups

__all__ = ["MAX_CALIBRATION_SIZE", "AR1Bias", "ar1_calibrated_bias"]


#: Largest simulation (chains x draws x D numbers per replicate) the calibration runs.
MAX_CALIBRATION_SIZE = 20_000_000


class AR1Bias(NamedTuple):
    """The KL's sampling bias of AR(1) chains matched to the draws (:func:`ar1_calibrated_bias`).

    Attributes
    ----------
    bias : float
        Mean KL(q_diag || q_full) of the matched chains' sample covariance (their true KL is
        0, so this is their bias).
    se : float
        Its Monte Carlo standard error over the replicates.
    rho : float
        The matched chains' lag-one correlation.
    """

    bias: float
    se: float
    rho: float


def _ar1_replicate(rho: float, shape: tuple, groups: int, chol: np.ndarray, seed: int, r: int):
    """``1 / n_KL`` and the KL's error of one replicate of AR(1) chains ``(C, S, D)`` of
    N(0, chol chol^T)."""
    z = np.random.default_rng([seed, r]).standard_normal(shape)
    a = math.sqrt(1.0 - rho * rho)
    z[:, 0] /= a  # so that the first draw is the stationary one
    x = lfilter([a], [1.0, -rho], z, axis=1) @ chol.T
    counts, means, m2s = group_moments(x, groups)
    n, _ = kl_bias_n(counts, means, m2s, jitter=0.0)
    kl = float(kl_diag_full(merge_groups(counts, means, m2s)))
    return (0.0 if n is None else 1.0 / n), kl - float(kl_diag_full(chol @ chol.T))


def _ar1_mean(rho: float, shape: tuple, groups: int, chol: np.ndarray, seed: int, reps: int):
    out = np.array([_ar1_replicate(rho, shape, groups, chol, seed, r) for r in range(reps)])
    return out.mean(0), out[:, 1].std(ddof=1) / math.sqrt(reps)


def ar1_calibrated_bias(
    n_obs: float,
    shape: tuple[int, int, int],
    groups: int,
    *,
    cov: np.ndarray | None = None,
    seed: int = 0,
    reps: int = 8,
    iters: int = 8,
    rtol: float = 0.01,
) -> AR1Bias | None:
    r"""The KL's bias by indirect inference: AR(1) chains that give the draws' own :math:`n_\mathrm{KL}`.

    :func:`kl_bias_n` whitens the groups' deviations with the pooled sample covariance,
    whose own noise is correlated with them: on autocorrelated chains :math:`\hat\beta`
    falls short of the bias, the more so the larger D and the slower the chains (whitening
    with the true covariance removes the shortfall; docs/notes/kl_references.md), while on
    independent draws it is right. The shortfall depends on the chains, not on the
    covariance: for chains whose whitened coordinates are independent AR(1) series with one
    :math:`\rho`, the law of the whitened sample covariance is invariant under rotations,
    so (as for the Wishart case of :func:`reports.gaussian.kl_sampling_bias`) the KL's bias
    does not depend on :math:`\Sigma`; the estimator's shortfall does, through the
    directions :math:`v_i` it weighs. So simulate such chains of
    :math:`\mathcal N(0, \hat\Sigma)`, the draws' own pooled covariance, in the draws' own
    shape and groups, find the :math:`\rho` at which the estimator returns the draws'
    :math:`1/n_\mathrm{KL}` on average, and take those chains' mean KL less
    :math:`\mathrm{KL}(\hat\Sigma)` as the bias. The estimator's shortfall is then undone
    to the extent that the draws' autocorrelations act on it as an AR(1)'s do.

    The search is on the products' autocorrelation time :math:`\tau = (1 + \rho^2) / (1 -
    \rho^2)`, to which :math:`1/\hat n` is close to proportional: starting from
    :math:`\tau = N / n_\mathrm{KL}`, each step scales :math:`\tau` by the ratio of the
    target to the simulated :math:`1/\hat n` (common random numbers across steps) until
    they agree within ``rtol``.

    Parameters
    ----------
    n_obs : float
        :math:`n_\mathrm{KL}` of the draws (:func:`kl_bias_n`).
    shape : (int, int, int)
        ``(chains, draws per chain, D)``.
    groups : int
        The draws' number of chain groups.
    cov : np.ndarray, optional
        :math:`\hat\Sigma` ``(D, D)``; the identity when not given.
    seed, reps, iters : int
        Seed of the simulation, replicates per evaluation, most steps.
    rtol : float, default 0.01

    Returns
    -------
    AR1Bias or None
        None when the draws are worth at least as many independent draws as they number
        (antithetic or independent draws: the estimator is right there), or when the
        search ends at independent chains.
    """
    total = shape[0] * shape[1]
    if not n_obs < total:
        return None
    chol = np.eye(shape[2]) if cov is None else np.linalg.cholesky(cov)
    target, tau = 1.0 / n_obs, total / n_obs
    for _ in range(iters):
        rho = min(math.sqrt((tau - 1.0) / (tau + 1.0)), 0.995)
        (inv, bias), se = _ar1_mean(rho, shape, groups, chol, seed, reps)
        ratio = target / inv if inv > 0 else 2.0
        if abs(ratio - 1.0) <= rtol:
            break
        tau = tau * ratio
        if not tau > 1.0:
            return None
    return AR1Bias(float(bias), float(se), rho)
