r"""The Monte Carlo floor of a total variation between two predictives, per comparison.

The predictive study (:mod:`zoo.studies.predictive`) compares the predictive of an
approximation :math:`q` with the samples' predictive, each a mixture over a finite number of
weight draws:

.. math::

    \hat p_q(c \mid x) = \frac1{n_q} \sum_{s=1}^{n_q} p(c \mid x, \theta^q_s), \qquad
    \hat p_\mathrm{samples}(c \mid x) = \frac1{n} \sum_{s=1}^{n} p(c \mid x, \theta_s).

Even when :math:`q` predicts exactly as the posterior does, the mean total variation
:math:`\frac1N \sum_x \tfrac12 \sum_c |\hat p_q - \hat p_\mathrm{samples}|` is not 0: both
mixtures carry draw noise. With :math:`\sigma^2_{q,c}(x) = v_{q,c}(x) / n_q`, the variance of
:math:`\hat p_q(c \mid x)` (:math:`v_{q,c}(x)` the variance over :math:`q`'s draws of
:math:`p(c \mid x, \theta)`, independent draws), and :math:`\sigma^2_{s,c}(x)` that of the
samples' mixture, the difference at each point and class is about normal with variance
:math:`\sigma^2_{q,c} + \sigma^2_{s,c}`, and :math:`\mathbb E|Z| = \sigma \sqrt{2/\pi}` gives
the floor

.. math::

    \mathrm{floor}_q = \frac1N \sum_x \tfrac12 \sum_c \sqrt{\tfrac2\pi}
        \sqrt{\sigma^2_{q,c}(x) + \sigma^2_{s,c}(x)}.

It depends on both sides: a confident predictive (probabilities near 0 or 1 for every draw)
has a far smaller :math:`v_q` than a diffuse one, so each comparison has its own floor (the
q_full floor that the study used to quote for every comparison was up to ~60x too high for
a confident q_diag). The samples' draws are autocorrelated, so their variance is not
:math:`v_s / n`: it is :math:`r \, v_s / n` with an inflation :math:`r` (:math:`n / n_\mathrm{eff}`
of the predictive) measured by :func:`split_inflation` from the two halves of the chains,
whose predictives differ by :math:`d_c(x)` with :math:`\mathbb E\, d^2 = r v_s (1/h_0 + 1/h_1)`
for halves of :math:`h_0, h_1` draws (chains that disagree raise :math:`r` and with it every
floor: a difference below its floor is not resolved). :math:`r` is pooled over all points
and classes, a ratio of means, so that one noisy point does not move it.

NumPy only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["split_inflation", "tv_floor"]


def split_inflation(
    p_half0: np.ndarray, p_half1: np.ndarray, var_samples: np.ndarray, n0: int, n1: int
) -> float:
    r"""The samples' variance inflation :math:`r` over independent draws (module docstring).

    .. math::

        r = \frac{\sum_{x,c} d_c(x)^2}{(1/n_0 + 1/n_1) \sum_{x,c} v_{s,c}(x)}

    Parameters
    ----------
    p_half0, p_half1 : np.ndarray
        The predictives ``(N, C)`` of the two halves of the samples (``n0`` and ``n1`` draws).
    var_samples : np.ndarray
        ``(N, C)``: the variance over the samples' draws of each class probability.
    n0, n1 : int
        Draws behind each half's predictive.

    Returns
    -------
    float
        :math:`r` (1 for independent draws on average; above 1 for autocorrelated or
        disagreeing chains); NaN when the samples' probabilities do not vary at all.
    """
    d2 = float(np.sum((np.asarray(p_half0, float) - np.asarray(p_half1, float)) ** 2))
    v = float(np.sum(np.asarray(var_samples, float))) * (1.0 / n0 + 1.0 / n1)
    return d2 / v if v > 0 else math.nan


def tv_floor(
    var_q: np.ndarray, n_q: int, var_samples: np.ndarray, n_samples: int, inflation: float = 1.0
) -> float:
    r"""Expected mean TV between ``q``'s and the samples' mixtures if they predicted alike.

    Parameters
    ----------
    var_q, var_samples : np.ndarray
        ``(N, C)``: the variance over each side's draws of each class probability.
    n_q, n_samples : int
        The draws in each mixture.
    inflation : float, default 1.0
        The samples' :func:`split_inflation` (1: independent draws). A non-finite value
        counts as 1 (the samples' probabilities did not vary: no noise to inflate).

    Returns
    -------
    float
        The floor of :func:`reports.predictive.predictive_tv` for this comparison.
    """
    r = inflation if math.isfinite(inflation) else 1.0
    var = np.asarray(var_q, float) / n_q + r * np.asarray(var_samples, float) / n_samples
    per_point = 0.5 * math.sqrt(2.0 / math.pi) * np.sqrt(np.maximum(var, 0.0)).sum(axis=1)
    return float(per_point.mean())
