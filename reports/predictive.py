r"""Function-space comparisons of two predictive distributions on the same test points.

NumPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["predictive_agreement", "predictive_tv"]


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
