r"""Mean-field versus full-covariance Gaussian fits of a sampled posterior, and their KL.

Following Farquhar, Smith & Gal (2020, "Liberty or Depth", section 4 and Appendix B), the
posterior draws :math:`\theta_1, \dots, \theta_S \in \mathbb{R}^D` of a sampler (NUTS) are
summarized by a full-covariance Gaussian :math:`q_\mathrm{full} = \mathcal{N}(\mu, \Sigma)`
and by its closest diagonal Gaussian under :math:`\mathrm{KL}(q_\mathrm{diag} \,\|\,
q_\mathrm{full})`,

.. math::

    q_\mathrm{diag} = \mathcal{N}\bigl(\mu, \operatorname{diag}(\sigma^2)\bigr), \qquad
    \sigma_i^2 = \frac{1}{(\Sigma^{-1})_{ii}},

whose divergence is

.. math::

    \mathrm{KL}(q_\mathrm{diag} \,\|\, q_\mathrm{full})
    = \tfrac12 \Bigl(\sum_i \log (\Sigma^{-1})_{ii} + \log\det\Sigma\Bigr) \ge 0,

with its sampling bias for :math:`S` draws (:func:`kl_sampling_bias`). Distances between the
two are in :mod:`reports.wasserstein`, the study's records of both in
:mod:`reports.price_of_mf`, flattening draws in :mod:`reports.draws`.

Everything here is NumPy/SciPy/scikit-learn; nothing knows about Pyro or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.linalg import LinAlgError, cholesky, solve_triangular
from scipy.optimize import brentq
from scipy.special import digamma
from sklearn.covariance import ledoit_wolf

__all__ = [
    "Block",
    "CovMethod",
    "GaussianFit",
    "as_draws",
    "cholesky_factor",
    "closest_diagonal",
    "fit_gaussian",
    "gaussian_from_moments",
    "iid_equivalent_draws",
    "is_diagonal",
    "kl_diag_full",
    "kl_sampling_bias",
]

CovMethod = Literal["empirical", "ledoit_wolf"]
Block = np.ndarray | slice | list[int]


@dataclass(frozen=True)
class GaussianFit:
    """A Gaussian fitted to posterior draws, recording how its covariance was estimated.

    Attributes
    ----------
    mean : np.ndarray
        Sample mean, shape ``(D,)``.
    cov : np.ndarray
        Covariance estimate plus ``jitter`` on the diagonal, shape ``(D, D)``.
    cov_method : str
        ``"empirical"`` (unbiased sample covariance, ``ddof=1``) or ``"ledoit_wolf"``.
    jitter : float
        Absolute amount added to every diagonal entry of the estimate.
    n_draws : int
        Number of draws ``S`` the fit used.
    dim : int
        Dimension ``D``.
    shrinkage : float or None
        Ledoit-Wolf shrinkage coefficient; ``None`` for the empirical estimate.
    """

    mean: np.ndarray
    cov: np.ndarray
    cov_method: str
    jitter: float
    n_draws: int
    dim: int
    shrinkage: float | None = None

    @property
    def rank_deficient(self) -> bool:
        """Whether the estimate before jitter is singular (empirical with ``S <= D``)."""
        return self.cov_method == "empirical" and self.n_draws <= self.dim


# --------------------------------------------------------------------------- helpers


def as_draws(draws: np.ndarray) -> np.ndarray:
    """Draws as a finite float array of shape ``(S, D)`` with ``S >= 2``, or a ValueError."""
    x = np.asarray(draws, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"draws must have shape (S, D), got {x.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"need at least 2 draws to estimate a covariance, got {x.shape[0]}")
    if not np.all(np.isfinite(x)):
        raise ValueError("draws contain NaN or infinite values")
    return x


def cholesky_factor(cov: np.ndarray) -> np.ndarray:
    """The lower Cholesky factor of a covariance, or a ValueError saying how to fix it."""
    cov = np.asarray(cov, dtype=float)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square matrix, got shape {cov.shape}")
    try:
        return cholesky(cov, lower=True, check_finite=True)
    except (LinAlgError, ValueError) as err:
        raise ValueError(
            f"covariance of shape {cov.shape} is not positive definite ({err}); "
            "fit it with a larger jitter or cov='ledoit_wolf'"
        ) from err


def _kl_from_chol(chol: np.ndarray) -> float:
    # (S^-1)_ii = sum_k (L^-1)_ki^2 with L^-1 lower triangular and (L^-1)_ii = 1 / L_ii, so
    # (S^-1)_ii L_ii^2 = 1 + L_ii^2 sum_{k>i} (L^-1)_ki^2 and the KL is a sum of log1p terms:
    # non-negative by construction and exactly 0 when S is diagonal.
    linv = solve_triangular(chol, np.eye(chol.shape[0]), lower=True)
    d = np.diag(chol)
    off = np.sum(np.tril(linv, -1) ** 2, axis=0)
    return float(0.5 * np.sum(np.log1p(d**2 * off)))


def is_diagonal(mat: np.ndarray) -> bool:
    """Whether a square matrix has no non-zero entry off its diagonal."""
    return not np.any(mat[~np.eye(mat.shape[0], dtype=bool)])


# --------------------------------------------------------------------------- Gaussians


def fit_gaussian(
    draws: np.ndarray, *, cov: CovMethod = "empirical", jitter: float = 1e-6
) -> GaussianFit:
    r"""Fit :math:`q_\mathrm{full} = \mathcal{N}(\mu, \Sigma)` to posterior draws.

    Parameters
    ----------
    draws : np.ndarray
        Shape ``(S, D)``.
    cov : {"empirical", "ledoit_wolf"}, default "empirical"
        ``"empirical"``: the unbiased sample covariance (``ddof=1``), singular when
        ``S <= D``. ``"ledoit_wolf"``: :func:`sklearn.covariance.ledoit_wolf` shrinkage
        towards a scaled identity (always positive definite for non-constant draws).
    jitter : float, default 1e-6
        **Absolute** amount added to every diagonal entry (in the units of the parameter
        variances), as in the paper's Appendix B; with ``S <= D`` the empirical estimate
        only becomes invertible through it.

    Returns
    -------
    GaussianFit
        Mean, covariance :math:`\hat\Sigma + \epsilon I` and the method and jitter used.

    Raises
    ------
    ValueError
        For fewer than 2 draws, non-finite values, an unknown ``cov`` or negative jitter.
    """
    x = as_draws(draws)
    if jitter < 0 or not np.isfinite(jitter):
        raise ValueError(f"jitter must be a finite non-negative number, got {jitter}")
    n, d = x.shape
    shrinkage = None
    if cov == "empirical":
        est = np.atleast_2d(np.cov(x, rowvar=False, ddof=1))
    elif cov == "ledoit_wolf":
        est, shrink = ledoit_wolf(x, assume_centered=False)
        shrinkage = float(shrink)
    else:
        raise ValueError(f"unknown cov method {cov!r}; use 'empirical' or 'ledoit_wolf'")
    est = 0.5 * (est + est.T)
    est[np.diag_indices(d)] += jitter
    return GaussianFit(x.mean(axis=0), est, cov, float(jitter), n, d, shrinkage)


def closest_diagonal(cov: np.ndarray) -> np.ndarray:
    r"""Variances of the diagonal Gaussian closest to :math:`\mathcal{N}(\mu, \Sigma)`.

    The minimizer of :math:`\mathrm{KL}(q_\mathrm{diag} \,\|\, \mathcal{N}(\mu, \Sigma))`
    over diagonal Gaussians keeps the mean and has variances

    .. math::

        \sigma_i^2 = \frac{1}{(\Sigma^{-1})_{ii}},

    computed from the Cholesky factor :math:`\Sigma = L L^\top` as
    :math:`(\Sigma^{-1})_{ii} = \sum_k (L^{-1})_{ki}^2`.

    Parameters
    ----------
    cov : np.ndarray
        Symmetric positive definite, shape ``(D, D)``.

    Returns
    -------
    np.ndarray
        Shape ``(D,)``; never larger than ``diag(cov)``.

    Raises
    ------
    ValueError
        If ``cov`` is not positive definite.
    """
    chol = cholesky_factor(cov)
    linv = solve_triangular(chol, np.eye(chol.shape[0]), lower=True)
    return 1.0 / np.sum(linv**2, axis=0)


def kl_diag_full(
    cov: np.ndarray, blocks: Mapping[str, Block] | None = None
) -> float | dict[str, float]:
    r"""KL divergence from the closest diagonal Gaussian to :math:`\mathcal{N}(\mu, \Sigma)`.

    .. math::

        \mathrm{KL}(q_\mathrm{diag} \,\|\, q_\mathrm{full})
        = \tfrac12 \Bigl(\sum_i \log (\Sigma^{-1})_{ii} + \log\det\Sigma\Bigr)
        = \tfrac12 \sum_i \log\Bigl(1 + L_{ii}^2 \sum_{k > i} (L^{-1})_{ki}^2\Bigr),

    the second form (with :math:`\Sigma = L L^\top`) being non-negative term by term and
    exactly 0 for a diagonal :math:`\Sigma`.

    Parameters
    ----------
    cov : np.ndarray
        Symmetric positive definite, shape ``(D, D)``.
    blocks : mapping of str to index array or slice, optional
        Parameter groups (e.g. per layer). Each block's KL uses its own marginal covariance
        :math:`\Sigma_{bb}` and a diagonal Gaussian fitted to that block.

    Returns
    -------
    float or dict of str to float
        The KL over all parameters; with ``blocks`` a dict with key ``"total"`` for it and
        one key per block.

    Raises
    ------
    ValueError
        If ``cov`` (or a block of it) is not positive definite, a block is empty or named
        ``"total"``.
    """
    cov = np.asarray(cov, dtype=float)
    total = _kl_from_chol(cholesky_factor(cov))
    if blocks is None:
        return total
    out = {"total": total}
    for name, idx in blocks.items():
        if name == "total":
            raise ValueError("a block may not be named 'total' (that key holds the full KL)")
        index = np.arange(cov.shape[0])[idx]
        if index.size == 0:
            raise ValueError(f"block {name!r} selects no parameters")
        out[name] = _kl_from_chol(cholesky_factor(cov[np.ix_(index, index)]))
    return out


def kl_sampling_bias(n: float, d: int) -> float:
    r"""Expected excess of :func:`kl_diag_full` of a sample covariance of ``n`` i.i.d. draws.

    For :math:`n` independent draws of :math:`\mathcal{N}(\mu, \Sigma)` in :math:`d`
    dimensions, :math:`(n-1)\hat\Sigma` (the ``ddof=1`` sample covariance) is Wishart with
    :math:`m = n - 1` degrees of freedom, so :math:`\mathbb{E}\log\det\hat\Sigma` and, since
    :math:`1 / (\hat\Sigma^{-1})_{ii}` is :math:`\chi^2_{m-d+1} / m` times its population
    value, :math:`\mathbb{E}\log(\hat\Sigma^{-1})_{ii}` are known in closed form. Together

    .. math::

        \mathbb{E}\,\mathrm{KL}(\hat\Sigma) - \mathrm{KL}(\Sigma)
        = \tfrac12 \Bigl(\sum_{k=1}^{d} \psi\bigl(\tfrac{n-k}{2}\bigr)
          - d\,\psi\bigl(\tfrac{n-d}{2}\bigr)\Bigr)
        \approx \frac{d(d-1)}{4n},

    with :math:`\psi` the digamma function. The bias does not depend on :math:`\Sigma`: the
    same number is added whatever the true correlations are, so ``kl - kl_sampling_bias(n, d)``
    is an unbiased estimate of the population KL for i.i.d. Gaussian draws. Draws of a Markov
    chain carry less information than ``n`` independent ones; :func:`iid_equivalent_draws`
    turns a measured bias (the shift null of :mod:`reports.kl_null`) back into an ``n``.

    Parameters
    ----------
    n : float
        Number of draws; ``n > d`` (non-integer values interpolate).
    d : int
        Dimension.

    Returns
    -------
    float
        The bias in nats; 0 for ``d == 1``.

    Raises
    ------
    ValueError
        If ``d < 1`` or ``n <= d`` (the sample covariance is singular).
    """
    if d < 1:
        raise ValueError(f"d must be at least 1, got {d}")
    if not n > d:
        raise ValueError(
            f"n = {n} draws in d = {d} dimensions: the sample covariance is "
            "singular; the bias is defined for n > d"
        )
    k = np.arange(1, d + 1)
    return float(0.5 * (digamma((n - k) / 2.0).sum() - d * digamma((n - d) / 2.0)))


def iid_equivalent_draws(bias: float, d: int) -> float:
    """The number of i.i.d. Gaussian draws whose :func:`kl_sampling_bias` equals ``bias``.

    Applied to the shift null of a chain's draws (:func:`reports.kl_null.kl_shift_null`), it
    says how many independent draws the covariance estimate is worth: the KL's own effective
    sample size, which in general differs from the per-parameter ESS.

    Parameters
    ----------
    bias : float
        A KL bias in nats, ``> 0``.
    d : int
        Dimension, ``>= 2`` (in one dimension the bias is 0 for every ``n``).

    Returns
    -------
    float
        ``n > d`` with ``kl_sampling_bias(n, d) == bias``; ``inf`` if ``bias <= 0``.

    Raises
    ------
    ValueError
        If ``d < 2``.
    """
    if d < 2:
        raise ValueError(f"d must be at least 2 (in one dimension the bias is 0), got {d}")
    if not bias > 0:
        return math.inf
    lo, hi = d + 1e-9, 2.0 * d
    while kl_sampling_bias(hi, d) > bias:  # decreasing in n, to 0 as n -> inf
        lo, hi = hi, 2.0 * hi
    return float(brentq(lambda n: kl_sampling_bias(n, d) - bias, lo, hi, xtol=1e-6, rtol=1e-10))


def gaussian_from_moments(
    mean: np.ndarray, cov: np.ndarray, n_draws: int, *, jitter: float = 1e-6
) -> GaussianFit:
    r"""The :class:`GaussianFit` of draws known only by their mean and sample covariance.

    For a sampler that streams its moments instead of keeping its draws (e.g.
    ``zoo.inference.mcmc.streaming.Moments``): ``cov`` must be the unbiased (``ddof=1``)
    sample covariance of ``n_draws`` draws, so the fit is the ``"empirical"``
    :func:`fit_gaussian` of those draws (equal to rounding: tests/reports). Ledoit-Wolf
    shrinkage needs the draws themselves (its intensity is a fourth-moment statistic) and is
    not available here.

    Parameters
    ----------
    mean : np.ndarray
        ``(D,)``.
    cov : np.ndarray
        ``(D, D)``, the ``ddof=1`` sample covariance; symmetrized here.
    n_draws : int
        Number of draws ``S`` behind the moments (at least 2).
    jitter : float, default 1e-6
        Added to every diagonal entry, as in :func:`fit_gaussian`.

    Returns
    -------
    GaussianFit
        ``cov_method="empirical"``, ``shrinkage=None``.
    """
    m = np.atleast_1d(np.asarray(mean, dtype=float))
    c = np.atleast_2d(np.asarray(cov, dtype=float))
    d = m.shape[0]
    if m.ndim != 1 or c.shape != (d, d):
        raise ValueError(f"mean must be (D,) and cov (D, D), got {m.shape} and {c.shape}")
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(c))):
        raise ValueError("mean or cov contain NaN or infinite values")
    if n_draws < 2:
        raise ValueError(f"need at least 2 draws behind a covariance, got {n_draws}")
    if jitter < 0 or not np.isfinite(jitter):
        raise ValueError(f"jitter must be a finite non-negative number, got {jitter}")
    est = 0.5 * (c + c.T)
    est[np.diag_indices(d)] += jitter
    return GaussianFit(m.copy(), est, "empirical", float(jitter), int(n_draws), d, None)
