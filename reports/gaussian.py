r"""Mean-field versus full-covariance Gaussian approximations of a sampled posterior.

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
    = \tfrac12 \Bigl(\sum_i \log (\Sigma^{-1})_{ii} + \log\det\Sigma\Bigr) \ge 0.

The module also gives the closed-form Gaussian 2-Wasserstein distance, the exact empirical
2-Wasserstein distance between two equal-size sample sets (an assignment problem) and the
blog's "Wasserstein error" (how much farther from the draws the diagonal Gaussian is than the
full one), with its excess over each Gaussian's own sampling term. Flattening draws is in :mod:`reports.draws`, predictive comparisons in
:mod:`reports.predictive`.

Everything here is NumPy/SciPy/scikit-learn; nothing knows about Pyro or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, cholesky, eigh, solve_triangular
from scipy.optimize import brentq, linear_sum_assignment
from scipy.spatial.distance import cdist
from scipy.special import digamma
from sklearn.covariance import ledoit_wolf

__all__ = [
    "GaussianFit",
    "WassersteinError",
    "fit_gaussian",
    "closest_diagonal",
    "kl_diag_full",
    "kl_sampling_bias",
    "iid_equivalent_draws",
    "w2_gaussian",
    "empirical_w2",
    "wasserstein_error",
    "diag_vs_full",
    "diag_vs_full_moments",
    "gaussian_from_moments",
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


class WassersteinError(NamedTuple):
    """Empirical 2-Wasserstein distances of ``q_diag`` and ``q_full`` draws to the draws.

    Attributes
    ----------
    w_diag : float
        :math:`W_2` between ``n`` draws of :math:`q_\\mathrm{diag}` and the posterior draws.
    w_full : float
        :math:`W_2` between ``n`` draws of :math:`q_\\mathrm{full}` and the posterior draws.
    error : float
        ``w_diag - w_full``: the blog's extra error of the mean-field assumption.
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


# --------------------------------------------------------------------------- helpers


def _as_draws(draws: np.ndarray) -> np.ndarray:
    x = np.asarray(draws, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"draws must have shape (S, D), got {x.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"need at least 2 draws to estimate a covariance, got {x.shape[0]}")
    if not np.all(np.isfinite(x)):
        raise ValueError("draws contain NaN or infinite values")
    return x


def _cholesky(cov: np.ndarray) -> np.ndarray:
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


def _sqrtm_psd(mat: np.ndarray) -> np.ndarray:
    if _is_diagonal(mat):
        return np.diag(np.sqrt(np.clip(np.diag(mat), 0.0, None)))
    w, v = eigh(0.5 * (mat + mat.T))
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def _is_diagonal(mat: np.ndarray) -> bool:
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
    x = _as_draws(draws)
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
    chol = _cholesky(cov)
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
    total = _kl_from_chol(_cholesky(cov))
    if blocks is None:
        return total
    out = {"total": total}
    for name, idx in blocks.items():
        if name == "total":
            raise ValueError("a block may not be named 'total' (that key holds the full KL)")
        index = np.arange(cov.shape[0])[idx]
        if index.size == 0:
            raise ValueError(f"block {name!r} selects no parameters")
        out[name] = _kl_from_chol(_cholesky(cov[np.ix_(index, index)]))
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
    if _is_diagonal(s1) and not _is_diagonal(s2):
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
    r"""The blog's Wasserstein error of the mean-field assumption, and its excess.

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
    return _wasserstein_error(np.asarray(draws, dtype=float), fit, closest_diagonal(fit.cov), seed)


def _wasserstein_error(
    x: np.ndarray, fit: GaussianFit, var: np.ndarray, seed: int
) -> WassersteinError:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(x.shape)
    z2 = rng.standard_normal(x.shape)
    chol, sd = _cholesky(fit.cov).T, np.sqrt(var)
    full, full2 = fit.mean + z @ chol, fit.mean + z2 @ chol
    diag, diag2 = fit.mean + z * sd, fit.mean + z2 * sd
    w_diag, w_full = empirical_w2(diag, x), empirical_w2(full, x)
    s_diag, s_full = empirical_w2(diag, diag2), empirical_w2(full, full2)
    excess = (w_diag**2 - 0.5 * s_diag**2) - (w_full**2 - 0.5 * s_full**2)
    return WassersteinError(w_diag, w_full, w_diag - w_full, x.shape[0], s_diag, s_full, excess)


def diag_vs_full(
    draws: np.ndarray,
    blocks: Mapping[str, Block] | None = None,
    *,
    cov: CovMethod = "empirical",
    jitter: float = 1e-6,
    seed: int,
    w_max_draws: int = 2000,
) -> dict[str, Any]:
    r"""All diagonal-versus-full Gaussian measures of a posterior, as one flat record.

    Parameters
    ----------
    draws : np.ndarray
        Posterior draws, shape ``(S, D)``.
    blocks : mapping of str to index array or slice, optional
        Parameter groups for per-block KLs (e.g. :attr:`reports.draws.FlatDraws.blocks`).
    cov, jitter
        Passed to :func:`fit_gaussian`.
    seed : int
        Seed for :func:`wasserstein_error`.
    w_max_draws : int, default 2000
        The Wasserstein error uses at most this many draws, evenly spaced over all of them
        (the exact assignment costs :math:`O(S^3)`: seconds at 2000, minutes at 8000); the
        Gaussian fit and the KL use every draw.

    Returns
    -------
    dict
        Plain floats, ints and strings: ``kl_diag_full`` (total) and
        ``kl_diag_full.<block>`` per block; ``w2_diag_full``, the closed-form
        :func:`w2_gaussian` between :math:`q_\mathrm{diag}` and :math:`q_\mathrm{full}`;
        ``w_diag``, ``w_full``, ``w_error``, ``w_diag_self``, ``w_full_self`` and
        ``w_excess`` from :func:`wasserstein_error` and ``w_draws``, the number of draws they
        used; and
        ``cov_method``, ``jitter``, ``shrinkage`` (None, not applicable, for empirical),
        ``n_draws``, ``dim``.
    """
    fit = fit_gaussian(draws, cov=cov, jitter=jitter)
    out, var = _kl_w2_record(fit, blocks)
    out.update(_w_record(np.asarray(draws, dtype=float), fit, var, seed, w_max_draws))
    out.update(_fit_record(fit))
    return out


# --------------------------------------------------------------------------- moments
# diag_vs_full and diag_vs_full_moments share these three: the two paths cannot drift.


def _kl_w2_record(fit: GaussianFit, blocks: Mapping[str, Block] | None) -> tuple[dict, np.ndarray]:
    """``kl_diag_full`` (and per block) and ``w2_diag_full`` of a fit; q_diag's variances."""
    var = closest_diagonal(fit.cov)
    kl = kl_diag_full(fit.cov, blocks)
    out: dict[str, Any] = {}
    if isinstance(kl, dict):
        out["kl_diag_full"] = kl["total"]
        out.update({f"kl_diag_full.{k}": v for k, v in kl.items() if k != "total"})
    else:
        out["kl_diag_full"] = kl
    out["w2_diag_full"] = w2_gaussian(fit.mean, np.diag(var), fit.mean, fit.cov)
    return out, var


def _w_record(
    x: np.ndarray, fit: GaussianFit, var: np.ndarray, seed: int, w_max_draws: int, suffix: str = ""
) -> dict[str, Any]:
    """The Wasserstein error of ``fit`` against at most ``w_max_draws`` of the draws ``x``."""
    if x.shape[0] > w_max_draws:
        x = x[np.linspace(0, x.shape[0] - 1, w_max_draws).round().astype(int)]
    we = _wasserstein_error(x, fit, var, seed)
    keys = ("w_diag", "w_full", "w_error", "w_diag_self", "w_full_self", "w_excess", "w_draws")
    values = (we.w_diag, we.w_full, we.error, we.w_diag_self, we.w_full_self, we.excess, we.n)
    return {k + suffix: v for k, v in zip(keys, values, strict=True)}


def _fit_record(fit: GaussianFit) -> dict[str, Any]:
    return {
        "cov_method": fit.cov_method,
        "jitter": fit.jitter,
        "shrinkage": fit.shrinkage,
        "n_draws": fit.n_draws,
        "dim": fit.dim,
    }


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


def diag_vs_full_moments(
    mean: np.ndarray,
    cov: np.ndarray,
    blocks: Mapping[str, Block] | None = None,
    *,
    n_draws: int,
    jitter: float = 1e-6,
    draws: np.ndarray | None = None,
    seed: int = 0,
    w_max_draws: int = 2000,
    suffix: str = "_kept",
) -> dict[str, Any]:
    r""":func:`diag_vs_full` of draws known by their moments, and of a kept subset of them.

    :math:`q_\mathrm{full}` is :func:`gaussian_from_moments` of ``mean`` and ``cov`` (the
    ``ddof=1`` covariance of ``n_draws`` draws) and :math:`q_\mathrm{diag}` its KL-closest
    diagonal Gaussian. The KLs and the closed-form W2 need nothing else and are computed by
    the same code as :func:`diag_vs_full`, under the same keys: given the moments of the
    draws that :func:`diag_vs_full` sees, the two agree to rounding (tests/reports). The
    empirical Wasserstein error needs draws: with ``draws`` (e.g. the thinned subset a
    streaming sampler keeps) it compares these two Gaussians with those draws, and its keys
    carry ``suffix`` to say so.

    Parameters
    ----------
    mean, cov, n_draws, jitter
        As :func:`gaussian_from_moments`.
    blocks : mapping of str to index array or slice, optional
        Parameter groups for per-block KLs.
    draws : np.ndarray, optional
        ``(S, D)`` draws for the Wasserstein error (at most ``w_max_draws`` of them, evenly
        spaced, are used); without them there are no ``w_*`` keys.
    seed : int, default 0
        Seed of the Gaussians' draws in the Wasserstein error.
    w_max_draws : int, default 2000
    suffix : str, default "_kept"
        Appended to every Wasserstein key (``w_error_kept``, ``w_draws_kept``, ...).

    Returns
    -------
    dict
        ``kl_diag_full``, ``kl_diag_full.<block>``, ``w2_diag_full``; with ``draws``
        ``w_diag``, ``w_full``, ``w_error``, ``w_diag_self``, ``w_full_self``, ``w_excess``
        and ``w_draws``, each with ``suffix``; ``cov_method`` (``"empirical"``), ``jitter``,
        ``shrinkage`` (None), ``n_draws`` and ``dim``.
    """
    fit = gaussian_from_moments(mean, cov, n_draws, jitter=jitter)
    out, var = _kl_w2_record(fit, blocks)
    if draws is not None:
        x = _as_draws(draws)
        if x.shape[1] != fit.dim:
            raise ValueError(f"draws have {x.shape[1]} columns, the moments {fit.dim}")
        out.update(_w_record(x, fit, var, seed, w_max_draws, suffix))
    out.update(_fit_record(fit))
    return out
