r"""The R-hat of the KL itself: split and nested R-hat of its per-draw influence values.

Vehtari et al. (2021) ask for :math:`\hat R` and ESS per quantity of interest, and the
price-of-mean-field study's quantity of interest is :math:`\mathrm{KL}(q_\mathrm{diag} \|
q_\mathrm{full})` of the draws' covariance, which is not the mean of anything per draw, so
:math:`\hat R` cannot be computed on it directly. To first order it is: with
:math:`P = \Sigma^{-1}`,

.. math::

    \mathrm{KL}(\Sigma) = \tfrac12 \Bigl(\sum_i \log P_{ii} + \log\det\Sigma\Bigr),
    \qquad
    G = \frac{\partial\,\mathrm{KL}}{\partial \Sigma}
      = \tfrac12 \bigl(P - P\,\mathrm{diag}(P)^{-1} P\bigr)

(:math:`\partial \log\det\Sigma = P`, :math:`\partial \log P_{ii} = -P e_i e_i^\top P /
P_{ii}`), so the KL of any group of draws is, to first order,
:math:`\mathrm{KL}(\hat\Sigma) + \overline{\psi} - \operatorname{tr}(G \hat\Sigma)` with the
*influence values*

.. math::

    \psi_t = (x_t - \hat\mu)^\top G\, (x_t - \hat\mu),

(Hampel's influence function of a smooth functional of the second moments). Chains whose
covariances disagree have different means of :math:`\psi`; chains that agree up to their
Monte Carlo noise do not. The KL's :math:`\hat R` is therefore the rank-normalized split
:math:`\hat R` (Vehtari et al. 2021) of :math:`\psi` over the chains, and its nested
:math:`\hat R` (Margossian et al. 2024) over the superchains, both by arviz-stats.
:math:`G` is taken at the pooled covariance (plus the fit's jitter, as the KL is). It is
blind to what the first order is blind to (the sampling bias, :mod:`reports.kl_reference`),
and reads only the total KL. NumPy and arviz-stats only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from arviz_stats.base import array_stats

from reports.superchains import max_rhat_nested

__all__ = ["KLRhat", "kl_gradient", "kl_influence", "kl_rhat"]


class KLRhat(NamedTuple):
    """The KL's convergence diagnostics.

    Attributes
    ----------
    rhat : float or None
        Rank-normalized split R-hat of the influence values over the chains (None with one
        chain; NaN when the values never move).
    rhat_nested : float or None
        Nested R-hat over the superchains (None without two or more superchains).
    """

    rhat: float | None
    rhat_nested: float | None


def kl_gradient(cov: np.ndarray) -> np.ndarray:
    r""":math:`G = \partial\,\mathrm{KL}(q_\mathrm{diag} \| q_\mathrm{full}) / \partial\Sigma
    = \tfrac12 (P - P\,\mathrm{diag}(P)^{-1} P)`, symmetric ``(D, D)``."""
    cov = np.asarray(cov, dtype=float)
    prec = np.linalg.inv(0.5 * (cov + cov.T))
    prec = 0.5 * (prec + prec.T)
    return 0.5 * (prec - (prec / np.diag(prec)) @ prec)


def kl_influence(draws: np.ndarray, *, jitter: float = 1e-6) -> np.ndarray:
    r"""Influence values :math:`\psi` of every draw of ``draws`` ``(C, S, D)``: shape ``(C, S)``.

    :math:`G` at the pooled ``ddof=1`` covariance plus ``jitter`` on its diagonal.
    """
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    c, s, d = x.shape
    y = x.reshape(-1, d)
    y = y - y.mean(0)
    cov = (y.T @ y) / max(y.shape[0] - 1, 1)
    cov[np.diag_indices_from(cov)] += jitter
    g = kl_gradient(cov)
    return np.einsum("nd,nd->n", y @ g, y).reshape(c, s)


def kl_rhat(
    draws: np.ndarray, superchain_ids: Sequence[int] | None = None, *, jitter: float = 1e-6
) -> KLRhat:
    """Split and nested R-hat of the KL of ``draws`` ``(C, S, D)`` (:func:`kl_influence`)."""
    psi = kl_influence(draws, jitter=jitter)
    if psi.shape[0] < 2:
        return KLRhat(None, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = float(np.asarray(array_stats.rhat(psi, method="rank", chain_axis=0, draw_axis=1)))
    nested = max_rhat_nested(psi[..., None], superchain_ids)
    return KLRhat(r, nested)
