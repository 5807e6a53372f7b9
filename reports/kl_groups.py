r"""Chain groups' moments and the KL's second-order sampling bias measured from their spread.

The machinery of :mod:`reports.kl_reference` (whose docstring gives the math): the
``(counts, means, co-moments)`` of contiguous chain groups, their pooled covariance (Chan,
Golub & LeVeque 1979), and :func:`kl_bias_n`, the KL's own effective n from the groups'
covariances. NumPy only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["group_moments", "kl_bias_n", "merge_groups"]


def merge_groups(counts: np.ndarray, means: np.ndarray, m2s: np.ndarray) -> np.ndarray:
    """Pooled ``ddof=1`` covariance of groups with counts, means and co-moments (Chan)."""
    total = float(counts.sum())
    mean = (counts[:, None] * means).sum(0) / total
    dev = means - mean
    return (m2s.sum(0) + (dev.T * counts) @ dev) / (total - 1)


def group_moments(
    draws: np.ndarray, groups: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts ``(G,)``, means ``(G, D)`` and co-moments ``(G, D, D)`` of ``groups``
    contiguous chain groups of ``draws`` ``(C, S, D)`` (default ``min(8, C)``, as
    :func:`numpy.array_split` splits the chains)."""
    x = np.asarray(draws, dtype=float)
    c, s, d = x.shape
    g = min(8, c) if groups is None else max(1, min(int(groups), c))
    parts = np.array_split(np.arange(c), g)
    counts = np.array([len(p) * s for p in parts], dtype=float)
    means = np.stack([x[p].reshape(-1, d).mean(0) for p in parts])
    m2s = np.stack([_comoment(x[p].reshape(-1, d) - means[i]) for i, p in enumerate(parts)])
    return counts, means, m2s


def _comoment(y: np.ndarray) -> np.ndarray:
    return y.T @ y


def kl_bias_n(
    counts: np.ndarray, means: np.ndarray, m2s: np.ndarray, *, jitter: float = 1e-6
) -> tuple[float | None, float | None]:
    r""":math:`n_\mathrm{KL}` (module docstring) from ``G >= 2`` groups of draws, and the
    relative standard error of :math:`\hat\beta` (so of :math:`1/n_\mathrm{KL}` and of the
    bias), :math:`\operatorname{sd}_g(y_g) / (\sqrt G\, \hat\beta)` with
    :math:`y_g = G n_g Q(E_g) / (2 (G-1) N)` the group terms whose mean is :math:`\hat\beta`.

    Parameters
    ----------
    counts : np.ndarray
        Draws per group :math:`n_g`, ``(G,)``.
    means, m2s : np.ndarray
        Each group's mean ``(G, D)`` and co-moment about it ``(G, D, D)``
        (:math:`\sum_t (x_t - \bar x_g)(x_t - \bar x_g)^\top`).
    jitter : float, default 1e-6
        Added to the pooled covariance's diagonal, as the KL's fit adds it.

    Returns
    -------
    (float or None, float or None)
        ``(n, relative se)``; None with fewer than two groups, for one coordinate, or where
        the measured bias is not positive (noise of a KL near its floor).
    """
    g, d = means.shape
    if g < 2 or d < 2:
        return None, None
    total = float(counts.sum())
    pooled = merge_groups(counts, means, m2s)
    pooled[np.diag_indices(d)] += jitter
    lam, vec = np.linalg.eigh(0.5 * (pooled + pooled.T))
    if not lam[0] > 0:
        return None, None
    isq = (vec / np.sqrt(lam)) @ vec.T  # the symmetric inverse root
    v = isq / np.linalg.norm(isq, axis=0)  # columns v_i
    y = np.empty(g)
    for k in range(g):
        cov_g = m2s[k] / (counts[k] - 1)
        cov_g[np.diag_indices(d)] += jitter
        e = isq @ (cov_g - pooled) @ isq
        ev = e @ v
        q = (ev * ev).sum() - 0.5 * ((v * ev).sum(0) ** 2).sum() - 0.5 * (e * e).sum()
        y[k] = g * counts[k] * q / (2.0 * (g - 1) * total)
    beta = float(y.mean())
    if not beta > 0:
        return None, None
    return float(d * (d - 1) / (4.0 * beta)), float(y.std(ddof=1) / math.sqrt(g) / beta)
