r"""Function-space comparisons of two predictive distributions on the same test points, and
whether a sampler's chains agree on the predictions (:func:`predictive_convergence`).

Each function takes class probabilities of shape ``(N, C)``, one row per input point, e.g.
the posterior predictive of a sampler (the reference) and of an approximation to it.
:func:`compare_predictives` gives the three comparisons of the predictive study
(:mod:`zoo.studies.predictive`) at once. NumPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from arviz_stats.base import array_stats

from reports.superchains import max_rhat_nested

__all__ = [
    "compare_predictives",
    "predictive_agreement",
    "predictive_convergence",
    "predictive_entropy",
    "predictive_kl",
    "predictive_tv",
]

#: Floor on the probabilities of the approximation inside :func:`predictive_kl`: a class the
#: reference gives mass to and the approximation gives (numerically) none costs
#: ``-log(KL_FLOOR)`` ~ 690 nats instead of an infinite KL.
KL_FLOOR = 1e-300


def _pair(p1: np.ndarray, p2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p1, p2 = np.asarray(p1, float), np.asarray(p2, float)
    if p1.ndim != 2 or p1.shape != p2.shape:
        raise ValueError(f"p1 and p2 must have the same shape (N, C), got {p1.shape}, {p2.shape}")
    if p1.shape[0] == 0:
        raise ValueError("p1 and p2 have no points (N == 0)")
    return p1, p2


def predictive_agreement(p1: np.ndarray, p2: np.ndarray) -> float:
    r"""Fraction of points where two predictive distributions pick the same class.

    .. math::

        \frac1N \sum_n \bigl[\arg\max_c p^{(1)}_{nc} = \arg\max_c p^{(2)}_{nc}\bigr]

    Parameters
    ----------
    p1, p2 : np.ndarray
        Class probabilities, shape ``(N, C)``. Ties go to the lowest class index.

    Returns
    -------
    float
    """
    p1, p2 = _pair(p1, p2)
    return float(np.mean(np.argmax(p1, axis=1) == np.argmax(p2, axis=1)))


def predictive_tv(p1: np.ndarray, p2: np.ndarray) -> float:
    r"""Mean total-variation distance between two predictive distributions.

    .. math::

        \frac1N \sum_n \tfrac12 \sum_c \bigl|p^{(1)}_{nc} - p^{(2)}_{nc}\bigr| \in [0, 1]

    Parameters
    ----------
    p1, p2 : np.ndarray
        Class probabilities, shape ``(N, C)``.

    Returns
    -------
    float
    """
    p1, p2 = _pair(p1, p2)
    return float(np.mean(0.5 * np.sum(np.abs(p1 - p2), axis=1)))


def predictive_kl(p_ref: np.ndarray, p: np.ndarray) -> float:
    r"""Mean KL divergence from a reference predictive distribution to another.

    .. math::

        \frac1N \sum_n \sum_c p^{\mathrm{ref}}_{nc}
        \bigl(\log p^{\mathrm{ref}}_{nc} - \log p_{nc}\bigr) \ge 0

    Classes with :math:`p^{\mathrm{ref}}_{nc} = 0` contribute 0; ``p`` is floored at
    :data:`KL_FLOOR` so that the result stays finite.

    Parameters
    ----------
    p_ref : np.ndarray
        Reference class probabilities (e.g. the sampler's), shape ``(N, C)``.
    p : np.ndarray
        Class probabilities of the approximation, same shape.

    Returns
    -------
    float
        In nats.
    """
    p_ref, p = _pair(p_ref, p)
    ratio = np.log(np.maximum(p_ref, KL_FLOOR)) - np.log(np.maximum(p, KL_FLOOR))
    terms = np.where(p_ref > 0, p_ref * ratio, 0.0)
    return float(np.mean(np.maximum(np.sum(terms, axis=1), 0.0)))


def predictive_entropy(p: np.ndarray) -> float:
    r"""Mean entropy of predictive distributions, :math:`-\frac1N\sum_n\sum_c p_{nc}\log p_{nc}`.

    Parameters
    ----------
    p : np.ndarray
        Class probabilities, shape ``(N, C)``.

    Returns
    -------
    float
        In nats, between 0 and ``log C``.
    """
    p, _ = _pair(p, p)
    return float(np.mean(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), 1)))


def compare_predictives(p_ref: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Total variation, agreement and KL of ``p`` against the reference ``p_ref``.

    Parameters
    ----------
    p_ref, p : np.ndarray
        Class probabilities, shape ``(N, C)``; ``p_ref`` is the reference (the samples).

    Returns
    -------
    dict
        ``tv`` (:func:`predictive_tv`), ``agree`` (:func:`predictive_agreement`) and ``kl``
        (:func:`predictive_kl`, KL(p_ref || p)).
    """
    return {
        "tv": predictive_tv(p_ref, p),
        "agree": predictive_agreement(p_ref, p),
        "kl": predictive_kl(p_ref, p),
    }


def predictive_convergence(
    probs: np.ndarray, superchain_ids: Sequence[int] | None = None
) -> dict[str, float | int | None]:
    """R-hat and bulk ESS of the predictive class probabilities, point by point.

    A network's weights are not identified (hidden units permute, signs flip, a dead unit's
    weights are free), so chains can agree on every prediction while some weights' R-hat
    stays high, or mix in the weights of a unit that does not reach the output at all; the
    question a posterior over functions must answer is whether the chains agree on the
    predictions. This is the weights' diagnostic applied to :math:`p(y = k \\mid x_i,
    \theta)`: rank-normalized split R-hat and bulk ESS (arviz-stats) of each point's
    probability of each class over chains and draws. For a regression network, pass its
    output, the mean of :math:`y` at each point, as one "class" (``(chain, draw, point, 1)``).

    Parameters
    ----------
    probs : np.ndarray
        ``(chain, draw, point, class)`` probabilities; with two classes only class 1 is
        used (class 0 is its complement: the same R-hat).
    superchain_ids : sequence of int, optional
        The superchain of each chain (chains from the same start): with two or more,
        ``rhat_nested_pred`` is the largest finite nested R-hat (Margossian et al. 2024,
        :func:`reports.diagnostics.max_rhat_nested`) over the same points and classes.

    Returns
    -------
    dict
        ``max_r_hat_pred`` and ``median_r_hat_pred`` (None with one chain), ``min_ess_bulk_pred``
        and ``median_ess_bulk_pred``, over the points and classes whose statistic is finite
        (a probability that every draw rounds to the same value has none),
        ``n_pred_constant``, how many had no finite R-hat, and ``rhat_nested_pred`` (None
        without two or more superchains).
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 4:
        raise ValueError(f"probs must be (chain, draw, point, class), got shape {p.shape}")
    if p.shape[-1] == 2:
        p = p[..., 1:]
    p = p.reshape(p.shape[0], p.shape[1], -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.asarray(array_stats.ess(p, chain_axis=0, draw_axis=1, method="bulk"))
        rhat = (
            np.asarray(array_stats.rhat(p, chain_axis=0, draw_axis=1)) if p.shape[0] >= 2 else None
        )
    moved = (p.max((0, 1)) - p.min((0, 1))) > 0
    ess = ess[moved & np.isfinite(ess)]

    def stat(a, f) -> float | None:
        return float(f(a)) if a is not None and a.size else None

    finite = None if rhat is None else rhat[moved & np.isfinite(rhat)]
    return {
        "max_r_hat_pred": stat(finite, np.max),
        "median_r_hat_pred": stat(finite, np.median),
        "min_ess_bulk_pred": stat(ess, np.min),
        "median_ess_bulk_pred": stat(ess, np.median),
        "n_pred_constant": int((~moved).sum()),
        "rhat_nested_pred": max_rhat_nested(p, superchain_ids, finite_only=True),
    }
