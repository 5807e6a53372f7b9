r"""Function-space comparisons of two predictive distributions on the same test points.

Each function takes class probabilities of shape ``(N, C)``, one row per input point, e.g.
the posterior predictive of a sampler (the reference) and of an approximation to it.
:func:`compare_predictives` gives the three comparisons of the predictive study
(:mod:`zoo.studies.predictive`) at once. NumPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "compare_predictives",
    "predictive_agreement",
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
