r"""The sampling bias of the closed-form W2(q_diag, q_full) of a sample covariance, removed by
a jackknife over chain groups.

``w2_diag_full`` is :math:`W_2` between :math:`q_\mathrm{full} = \mathcal N(\hat\mu,
\hat\Sigma)` and its closest diagonal Gaussian :math:`q_\mathrm{diag} = \mathcal N(\hat\mu,
\mathrm{diag}(1/\hat P_{ii}))` (:func:`reports.gaussian.closest_diagonal`), with

.. math::

    W_2^2 = \operatorname{tr}\Bigl(\Sigma_d + \Sigma
            - 2 \bigl(\Sigma^{1/2} \Sigma_d \Sigma^{1/2}\bigr)^{1/2}\Bigr).

Like the KL it is a smooth function of the sample covariance that is 0 only on diagonal
matrices, so finite draws bias it upward: a diagonal truth gives :math:`W_2 = 0` and every
sample :math:`W_2 > 0`. Unlike the KL the bias has no closed form (there is no Wishart
identity for the matrix square root), and it is not additive in :math:`W_2` (for small
correlations :math:`W_2` is the square root of a quadratic in them), but it is in
:math:`W_2^2`, whose expansion in the covariance's noise :math:`E` has a linear term of
mean 0 and a quadratic one of mean :math:`a / n` for :math:`n` effective draws. The
jackknife over ``G`` exchangeable chain groups removes that term without knowing
:math:`a` or :math:`n` (Quenouille 1956; Efron & Stein 1981): with :math:`\theta` the
:math:`W_2^2` of all groups and :math:`\theta_{-g}` of all but group :math:`g`, the
pseudo-values

.. math::

    p_g = G\,\theta - (G - 1)\,\theta_{-g}

have mean :math:`W_2^2 + O(n^{-2})` (each leave-out keeps :math:`(G-1)/G` of the draws, so
its bias is :math:`G/(G-1)` times the whole's), and the estimate :math:`\bar p` has the
standard error :math:`\mathrm{sd}(p) / \sqrt G`. Chain groups, not single draws, are the
units because the draws of a chain are correlated and the groups are not: the correction
needs no effective n at all. It can be negative when the true :math:`W_2` is near 0, so it
is reported in :math:`W_2^2` (parameter units squared), not as a root.

Its systematic error. Unlike the KL's Wishart bias, which is the same for every
:math:`\Sigma`, the bias of :math:`W_2^2` depends on :math:`\Sigma`, and the jackknife (like
a parametric bootstrap) measures it at the sample covariance, whose spurious correlations
make it slightly larger than at a diagonal truth: on a diagonal target it over-corrects by
about 3% of the bias on i.i.d. draws (D = 100, n = 8000, 4 groups; a Wishart parametric
bootstrap at the true n over-corrects by the same 3%) and by 8% on NUTS draws (n about
3000). On a rotated target, where the true :math:`W_2` is well above its noise, it is
within its s.e. at D = 20 and 100, and over-corrects by 7% (5.6 s.e.) at D = 1000, n about
8000: the systematic error grows with D/n and the s.e. does not include it
(docs/notes/kl_references.md). NumPy and SciPy only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from reports.gaussian import closest_diagonal
from reports.kl_reference import group_moments, merge_groups
from reports.wasserstein import w2_gaussian

__all__ = ["DebiasedW2", "debiased_w2_draws", "debiased_w2_groups", "w2sq_diag_full"]


class DebiasedW2(NamedTuple):
    """The squared W2(q_diag, q_full) of a chain-grouped sample and its jackknife correction.

    Attributes
    ----------
    w2sq : float
        The plug-in :math:`W_2^2` of the pooled covariance.
    w2sq_debiased : float or None
        The jackknife estimate :math:`\\bar p` (None with fewer than two groups).
    se : float or None
        Its standard error, :math:`\\mathrm{sd}(p)/\\sqrt G`.
    groups : int
        The number of chain groups.
    """

    w2sq: float
    w2sq_debiased: float | None
    se: float | None
    groups: int


def w2sq_diag_full(cov: np.ndarray, jitter: float = 0.0) -> float:
    """:math:`W_2^2` between :math:`\\mathcal N(0, \\Sigma)` and its closest diagonal Gaussian;
    ``jitter`` is added to the diagonal first (as the Gaussian fit does)."""
    c = 0.5 * (np.asarray(cov, dtype=float) + np.asarray(cov, dtype=float).T)
    c[np.diag_indices_from(c)] += jitter
    zero = np.zeros(c.shape[0])
    return w2_gaussian(zero, np.diag(closest_diagonal(c)), zero, c) ** 2


def debiased_w2_groups(
    counts: np.ndarray, means: np.ndarray, m2s: np.ndarray, *, jitter: float = 1e-6
) -> DebiasedW2:
    """:class:`DebiasedW2` from chain groups' counts ``(G,)``, means ``(G, D)`` and co-moments
    ``(G, D, D)`` (:func:`reports.kl_reference.group_moments`, or a stream's groups)."""
    counts = np.asarray(counts, dtype=float)
    g = counts.size
    theta = w2sq_diag_full(merge_groups(counts, means, m2s), jitter)
    if g < 2:
        return DebiasedW2(theta, None, None, g)
    leave_out = []
    for k in range(g):
        keep = np.arange(g) != k
        leave_out.append(w2sq_diag_full(merge_groups(counts[keep], means[keep], m2s[keep]), jitter))
    pseudo = g * theta - (g - 1) * np.asarray(leave_out)
    se = float(pseudo.std(ddof=1) / math.sqrt(g))
    return DebiasedW2(theta, float(pseudo.mean()), se, g)


def debiased_w2_draws(
    draws: np.ndarray, *, groups: int | None = None, jitter: float = 1e-6
) -> DebiasedW2:
    """:class:`DebiasedW2` of draws ``(C, S, D)`` split into ``groups`` contiguous chain
    groups (default ``min(8, C)``)."""
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    return debiased_w2_groups(*group_moments(x, groups), jitter=jitter)
