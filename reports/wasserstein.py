r"""Wasserstein distances between the mean-field and the full Gaussian fits and the draws.

The closed-form Gaussian 2-Wasserstein distance (:func:`w2_gaussian`), the exact empirical
2-Wasserstein distance between two equal-size sample sets (an assignment problem,
:func:`empirical_w2`) and the "Wasserstein error" of Farquhar, Smith & Gal's blog post accompanying their 2020
paper ("Is Mean-field Good Enough for Variational Inference in Bayesian Neural Networks?",
OATML, 29 Nov 2020) (how much farther from the draws
the diagonal Gaussian is than the full one), with its excess over each Gaussian's own
sampling term (:func:`wasserstein_error`). The fits are :mod:`reports.gaussian`'s.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import eigh
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from reports.gaussian import (
    CovMethod,
    GaussianFit,
    cholesky_factor,
    closest_diagonal,
    fit_gaussian,
    is_diagonal,
)

__all__ = [
    "WassersteinError",
    "empirical_w2",
    "w2_gaussian",
    "wasserstein_error",
    "wasserstein_error_of_fit",
]


class WassersteinError(NamedTuple):
    """Empirical 2-Wasserstein distances of ``q_diag`` and ``q_full`` draws to the draws.

    Attributes
    ----------
    w_diag : float
        :math:`W_2` between ``n`` draws of :math:`q_\\mathrm{diag}` and the posterior draws.
    w_full : float
        :math:`W_2` between ``n`` draws of :math:`q_\\mathrm{full}` and the posterior draws.
    error : float
        ``w_diag - w_full``: the blog post's extra error of the mean-field assumption.
    n : int
        Number of draws on each side.
    w_diag_self, w_full_self : float
        :math:`W_2` between two independent sets of ``n`` draws of the same Gaussian: the
        distance that finite samples alone give.
    excess : float
        ``(w_diag**2 - w_diag_self**2 / 2) - (w_full**2 - w_full_self**2 / 2)``: the error on
        the squared scale with each Gaussian's own sampling term removed (see
        :func:`wasserstein_error`).
    """

    w_diag: float
    w_full: float
    error: float
    n: int
    w_diag_self: float = float("nan")
    w_full_self: float = float("nan")
    excess: float = float("nan")


def _sqrtm_psd(mat: np.ndarray) -> np.ndarray:
    if is_diagonal(mat):
        return np.diag(np.sqrt(np.clip(np.diag(mat), 0.0, None)))
    w, v = eigh(0.5 * (mat + mat.T))
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def w2_gaussian(m1: np.ndarray, s1: np.ndarray, m2: np.ndarray, s2: np.ndarray) -> float:
    r"""2-Wasserstein distance between two Gaussians in closed form.

    .. math::

        W_2^2 = \lVert m_1 - m_2 \rVert^2
        + \operatorname{tr}\Bigl(S_1 + S_2 - 2 \bigl(S_2^{1/2} S_1 S_2^{1/2}\bigr)^{1/2}\Bigr).

    Matrix square roots come from symmetric eigendecompositions with tiny negative
    eigenvalues (round-off) clipped to 0, and so does a tiny negative :math:`W_2^2`. When
    one covariance is diagonal its square root is taken elementwise, leaving one eigenvalue
    problem.

    Parameters
    ----------
    m1, m2 : np.ndarray
        Means, shape ``(D,)``.
    s1, s2 : np.ndarray
        Symmetric positive semi-definite covariances, shape ``(D, D)``.

    Returns
    -------
    float
        :math:`W_2 \ge 0`.
    """
    m1, m2 = np.atleast_1d(np.asarray(m1, float)), np.atleast_1d(np.asarray(m2, float))
    s1, s2 = np.atleast_2d(np.asarray(s1, float)), np.atleast_2d(np.asarray(s2, float))
    d = m1.shape[0]
    if m2.shape != (d,) or s1.shape != (d, d) or s2.shape != (d, d):
        raise ValueError(
            f"shapes do not match: m1 {m1.shape}, s1 {s1.shape}, m2 {m2.shape}, s2 {s2.shape}"
        )
    if is_diagonal(s1) and not is_diagonal(s2):
        s1, s2 = s2, s1  # W2 is symmetric; a diagonal s2 makes its square root free
    r2 = _sqrtm_psd(s2)
    inner = r2 @ s1 @ r2
    cross = eigh(0.5 * (inner + inner.T), eigvals_only=True)
    w2sq = (
        float(np.sum((m1 - m2) ** 2))
        + float(np.trace(s1) + np.trace(s2))
        - 2.0 * float(np.sum(np.sqrt(np.clip(cross, 0.0, None))))
    )
    return math.sqrt(max(w2sq, 0.0))


def empirical_w2(x: np.ndarray, y: np.ndarray) -> float:
    r"""Exact 2-Wasserstein distance between two equal-size empirical distributions.

    .. math::

        W_2 = \Bigl(\min_\pi \frac1n \sum_{i=1}^n \lVert x_i - y_{\pi(i)} \rVert^2\Bigr)^{1/2},

    the minimum over permutations :math:`\pi` solved exactly by
    :func:`scipy.optimize.linear_sum_assignment` on squared Euclidean costs
    (:math:`O(n^3)`; about a second for ``n = 1000``).

    Parameters
    ----------
    x, y : np.ndarray
        Shape ``(n, D)`` (or ``(n,)`` for 1-D points), same ``n``.

    Returns
    -------
    float
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    x = x[:, None] if x.ndim == 1 else x
    y = y[:, None] if y.ndim == 1 else y
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"x and y must have the same shape (n, D), got {x.shape} and {y.shape}")
    cost = cdist(x, y, metric="sqeuclidean")
    rows, cols = linear_sum_assignment(cost)
    return math.sqrt(float(cost[rows, cols].mean()))


def wasserstein_error(
    draws: np.ndarray, *, seed: int, cov: CovMethod = "empirical", jitter: float = 1e-6
) -> WassersteinError:
    r"""The blog post's Wasserstein error of the mean-field assumption, and its excess.

    With :math:`q_\mathrm{full}` fitted by :func:`fit_gaussian` and :math:`q_\mathrm{diag}`
    its KL-closest diagonal Gaussian, draw ``S`` points from each (common random numbers:
    :math:`\mu + L z` and :math:`\mu + \sigma \odot z` with the same standard normal
    :math:`z`, so the difference reflects only the covariance) and return

    .. math::

        W_2(\hat q_\mathrm{diag}, \hat p) - W_2(\hat q_\mathrm{full}, \hat p),

    :math:`\hat p` being the ``S`` posterior draws and each :math:`W_2` from
    :func:`empirical_w2`.

    In tens of dimensions that difference is dominated by the sampling term of each
    Gaussian, not by its distance to the posterior: a matching of ``S`` points to ``S``
    points is farther the more spread the points are, and :math:`q_\mathrm{diag}` has less
    total variance than :math:`q_\mathrm{full}` (:math:`1/(\Sigma^{-1})_{ii} \le
    \Sigma_{ii}`). On exact draws of a correlated Gaussian, where :math:`q_\mathrm{full}` is
    right and :math:`q_\mathrm{diag}` is not, the error comes out negative. ``excess``
    removes that term as a debiased (Sinkhorn-type) divergence does: with a second,
    independent set :math:`\hat q'` of ``S`` draws of each Gaussian (common random numbers
    again),

    .. math::

        \Bigl(W_2^2(\hat q_\mathrm{diag}, \hat p)
              - \tfrac12 W_2^2(\hat q_\mathrm{diag}, \hat q_\mathrm{diag}')\Bigr)
        - \Bigl(W_2^2(\hat q_\mathrm{full}, \hat p)
              - \tfrac12 W_2^2(\hat q_\mathrm{full}, \hat q_\mathrm{full}')\Bigr)

    (the posterior's own term :math:`\tfrac12 W_2^2(\hat p, \hat p')` would cancel). It is
    0 up to noise when the two Gaussians coincide and, on Gaussian draws, close to the
    closed-form :math:`W_2^2(q_\mathrm{diag}, q_\mathrm{full})` (tests/reports).

    Parameters
    ----------
    draws : np.ndarray
        Posterior draws, shape ``(S, D)``.
    seed : int
        Seed of the :func:`numpy.random.default_rng` generator for the Gaussian draws.
    cov, jitter
        Passed to :func:`fit_gaussian`.

    Returns
    -------
    WassersteinError
    """
    fit = fit_gaussian(draws, cov=cov, jitter=jitter)
    return wasserstein_error_of_fit(
        np.asarray(draws, dtype=float), fit, closest_diagonal(fit.cov), seed
    )


def wasserstein_error_of_fit(
    x: np.ndarray, fit: GaussianFit, var: np.ndarray, seed: int
) -> WassersteinError:
    """:func:`wasserstein_error` of draws ``x`` given their fit and q_diag's variances ``var``."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(x.shape)
    z2 = rng.standard_normal(x.shape)
    chol, sd = cholesky_factor(fit.cov).T, np.sqrt(var)
    full, full2 = fit.mean + z @ chol, fit.mean + z2 @ chol
    diag, diag2 = fit.mean + z * sd, fit.mean + z2 * sd
    w_diag, w_full = empirical_w2(diag, x), empirical_w2(full, x)
    s_diag, s_full = empirical_w2(diag, diag2), empirical_w2(full, full2)
    excess = (w_diag**2 - 0.5 * s_diag**2) - (w_full**2 - 0.5 * s_full**2)
    return WassersteinError(w_diag, w_full, w_diag - w_full, x.shape[0], s_diag, s_full, excess)
