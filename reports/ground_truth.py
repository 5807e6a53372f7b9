r"""Ground truth for the price-of-mean-field pipeline: draws of a known Gaussian.

On draws of :math:`\mathcal N(0, \Sigma)` with a known :math:`\Sigma` the population value of
what :mod:`zoo.studies.price_of_mf` estimates is exact. With :math:`q_\mathrm{diag}` the
KL-closest diagonal Gaussian (precisions :math:`(\Sigma^{-1})_{ii}`, as
:func:`reports.gaussian.closest_diagonal` defines it),

.. math::

    \mathrm{KL}(q_\mathrm{diag} \,\|\, \mathcal N(0, \Sigma))
    = \tfrac12 \Bigl(\sum_i \log (\Sigma^{-1})_{ii} + \log\det\Sigma\Bigr),

which is :func:`reports.gaussian.kl_diag_full` of :math:`\Sigma` itself. (The diagonal of the
covariance, :math:`\Sigma_{ii}`, gives :math:`\tfrac12(\sum_i \log\Sigma_{ii} - \log\det\Sigma)`
instead: the KL the other way round, ``kl_true_marginal``, reported for comparison only.)

:func:`ground_truth_metrics` runs the study's estimators on draws of shape ``(C, S, D)`` and
adds two error estimates that include the Monte Carlo error of the sampler:

- **groups**: the chains split into ``G`` groups of equal size; the KL and the excess of each
  group, their spread, and ``excess_se`` = spread / sqrt(G), the standard error of the
  excess of all chains (its variance scales as the inverse number of draws);
- **exact debiasing** (:mod:`reports.kl_reference`): ``kl_debiased`` = KL - b(n_eff, D),
  the exact Wishart bias at ``n_eff``, the KL's own effective n measured from the spread of
  the groups' covariances (:func:`reports.kl_reference.kl_bias_n`), with ``kl_debiased_se``,
  the jackknife over the same groups (each left-out estimate debiased at n scaled by the
  draws it keeps) with the bias's own error in quadrature. It uses no null;
- **fractions**: the KL on the leading 25/50/100% of every chain and its ``n_eff``, for the
  figure: the KL against 1/n_eff follows ``kl_debiased + b(n, D)``, a curve (the bias has a
  :math:`D^3 / 6 n^2` term), which is why a straight line through these points, extrapolated
  to 1/n = 0, is biased low (it was ``kl_extrapolated``: -2.3 nats at D = 150).

NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from arviz_stats.base import array_stats

from reports.gaussian import CovMethod, fit_gaussian, kl_diag_full
from reports.kl_null import kl_shift_null
from reports.kl_reference import debiased_kl_draws, ess
from reports.kl_rhat import kl_rhat
from reports.w2_reference import debiased_w2_draws, w2sq_diag_full

__all__ = [
    "ess",
    "ground_truth_metrics",
    "kl_true",
    "kl_true_marginal",
    "random_spd",
]


def random_spd(dim: int, condition: float, *, seed: int, rotate: bool = True) -> np.ndarray:
    """``Q diag(lambda) Q^T`` with ``lambda`` log-spaced over ``[1, condition]``.

    ``Q`` is Haar-distributed (QR of a Gaussian matrix, signs fixed); with ``rotate=False``
    the covariance is ``diag(lambda)`` in a random order (true KL 0).
    """
    rng = np.random.default_rng(seed)
    lam = np.geomspace(1.0, float(condition), dim) if dim > 1 else np.ones(1)
    lam = rng.permutation(lam)
    if not rotate:
        return np.diag(lam)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    q = q * np.sign(np.diag(r))
    cov = (q * lam) @ q.T
    return 0.5 * (cov + cov.T)


def kl_true(cov: np.ndarray) -> float:
    """KL(q_diag || N(0, cov)) with q_diag the KL-closest diagonal (the study's definition)."""
    return float(kl_diag_full(cov))


def kl_true_marginal(cov: np.ndarray) -> float:
    """``0.5 (sum log cov_ii - log det cov)``: q_diag taken as the marginal variances."""
    _, logdet = np.linalg.slogdet(cov)
    return float(0.5 * (np.sum(np.log(np.diag(cov))) - logdet))


def _n_eff(x: np.ndarray, groups: int) -> float | None:
    """The KL's effective n of draws ``(C, S, D)`` in ``groups`` chain groups
    (:func:`reports.kl_reference.kl_bias_n`), as :func:`debiased_kl_draws` measures it."""
    return debiased_kl_draws(x, groups=groups).n


def _kl(x: np.ndarray, cov: CovMethod, jitter: float) -> float:
    fit = fit_gaussian(x.reshape(-1, x.shape[-1]), cov=cov, jitter=jitter)
    return float(kl_diag_full(fit.cov))


def ground_truth_metrics(
    draws: np.ndarray,
    cov_true: np.ndarray,
    *,
    groups: int = 4,
    fractions: Sequence[float] = (0.25, 0.5, 1.0),
    cov: CovMethod = "empirical",
    jitter: float = 1e-6,
    reps: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """The study's KL, null and excess on ``draws`` ``(C, S, D)`` of N(0, ``cov_true``),
    beside the true KL, with their Monte Carlo errors (module docstring).

    Returns
    -------
    dict
        ``kl_true``, ``kl_true_marginal``, ``kl`` (all draws), ``kl_null``, ``kl_null_sd``,
        ``kl_excess``, ``kl_null_draws``; ``kl_group_mean``, ``kl_group_sd``,
        ``excess_group_mean``, ``excess_group_sd``, ``excess_se``; ``n_eff`` (all draws),
        ``ess_median`` (of the coordinates themselves); per fraction ``kl_f<pct>`` and
        ``n_eff_f<pct>``; ``kl_bias`` (the exact bias at ``n_eff``), ``kl_debiased``,
        ``kl_debiased_se`` (with ``kl_bias_se``, the bias's own error, in it); ``squares_n``,
        the centred squares' pooled ESS, for comparison; ``kl_rhat`` (the KL's own split
        R-hat, :mod:`reports.kl_rhat`) and ``max_r_hat`` (the coordinates' largest); the
        closed-form W2(q_diag, q_full) squared of the truth (``w2sq_true``), of the draws
        (``w2sq``) and jackknife-debiased (``w2sq_debiased`` and ``w2sq_debiased_se``,
        :mod:`reports.w2_reference`).
        ``n_eff`` is the KL's own n (before commit fff61d2 the median ESS of the centred squares).
    """
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    c, s, _ = x.shape
    if c % groups:
        raise ValueError(f"{c} chains do not split into {groups} equal groups")
    out: dict[str, Any] = {
        "kl_true": kl_true(cov_true),
        "kl_true_marginal": kl_true_marginal(cov_true),
    }
    null = kl_shift_null(x, cov=cov, jitter=jitter, reps=reps, seed=seed)
    out.update(
        kl=null.kl,
        kl_null=null.null_mean,
        kl_null_sd=null.null_sd,
        kl_excess=null.excess,
        kl_null_draws=null.iid_draws,
    )
    out.update(_group_excess(x, groups, cov=cov, jitter=jitter, reps=reps, seed=seed))
    deb = debiased_kl_draws(x, groups=groups, jitter=jitter)
    exact = cov == "empirical"  # the Wishart bias is the sample covariance's
    out.update(
        n_eff=deb.n,
        squares_n=deb.squares_n,
        ess_median=float(np.nanmedian(ess(x))),
        kl_bias=deb.bias if exact else None,
        kl_debiased=deb.debiased if exact else None,
        kl_debiased_se=deb.se if exact else None,
        kl_bias_se=deb.bias_se if exact else None,
    )
    w2 = debiased_w2_draws(x, groups=groups, jitter=jitter)
    with np.errstate(invalid="ignore", divide="ignore"):
        coord_rhat = np.asarray(array_stats.rhat(x, method="rank", chain_axis=0, draw_axis=1))
    out.update(
        kl_rhat=kl_rhat(x, jitter=jitter).rhat,
        max_r_hat=float(np.max(coord_rhat)),
        w2sq_true=w2sq_diag_full(cov_true),
        w2sq=w2.w2sq,
        w2sq_debiased=w2.w2sq_debiased if exact else None,
        w2sq_debiased_se=w2.se if exact else None,
    )
    for f in fractions:
        sub = x[:, : max(2, math.ceil(f * s))]
        pct = round(100 * f)
        out[f"kl_f{pct}"], out[f"n_eff_f{pct}"] = _kl(sub, cov, jitter), _n_eff(sub, groups)
    return out


def _group_excess(
    x: np.ndarray, groups: int, *, cov: CovMethod, jitter: float, reps: int, seed: int
) -> dict[str, float]:
    """The KL and its excess over the shift null in each of ``groups`` contiguous groups of
    chains: their means and spreads, and the Monte Carlo error of the excess."""
    k = x.shape[0] // groups
    parts = [x[g * k : (g + 1) * k] for g in range(groups)]
    gnull = [
        kl_shift_null(p, cov=cov, jitter=jitter, reps=reps, seed=seed + 1 + g)
        for g, p in enumerate(parts)
    ]
    gkl = np.array([n.kl for n in gnull])
    gex = np.array([n.excess for n in gnull])
    return {
        "kl_group_mean": float(gkl.mean()),
        "kl_group_sd": float(gkl.std(ddof=1)),
        "excess_group_mean": float(gex.mean()),
        "excess_group_sd": float(gex.std(ddof=1)),
        "excess_se": float(gex.std(ddof=1) / math.sqrt(groups)),
    }
