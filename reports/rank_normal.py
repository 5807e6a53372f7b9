r"""Rank-normalized split R-hat and bulk ESS of many columns at once, equal to arviz-stats'.

arviz-stats computes a column's rank-normalized split :math:`\hat R` (Vehtari et al. 2021,
``method="rank"``) and bulk ESS one column at a time: split every chain in two halves, rank
all draws of the column together (:func:`scipy.stats.rankdata`, ties averaged), map the
ranks to normal scores :math:`z = \Phi^{-1}((r - 3/8) / (n + 1/4))` (Blom 1958), and take
the classic :math:`\hat R` of :math:`z` and of the folded draws' scores
:math:`|x - \mathrm{median}(x)|` (the larger of the two), and the ESS of :math:`z`. A
stopping rule that asks these questions every few draws (the price of mean field's
``stop_at_grade``) pays for three rankings and three normal quantiles per column per
question, each a Python-level call.

:func:`split_rank_diagnostics` ranks every column in one sort, the folded draws in another,
and hands the normal scores to arviz-stats' own ``identity`` R-hat and ESS, so the numbers
are those of ``azs.rhat(x, method="rank")`` and ``azs.ess(x, method="bulk")`` bit for bit:
average ranks are integers and halves (exact in floating point), and the Blom transform,
:func:`scipy.special.ndtri` and the median's middle-pair mean are the same operations on
the same values. ``tests/reports/test_rank_normal.py`` checks the equality with ties, odd
lengths and non-finite columns.

NumPy, SciPy and arviz-stats only.
"""

from __future__ import annotations

import arviz_stats as azs
import numpy as np
from scipy import special

__all__ = ["split_rank_diagnostics"]

#: Blom's fractional offset, as arviz-stats' ``_backtransform_ranks``.
_BLOM = 3 / 8


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks (1-based, ties averaged) of every row of ``(k, n)`` ``x`` within its row, as
    ``scipy.stats.rankdata(row, method="average")``."""
    n = x.shape[-1]
    order = np.argsort(x, axis=-1)
    xs = np.take_along_axis(x, order, axis=-1)
    new = np.ones_like(xs, dtype=bool)
    new[:, 1:] = xs[:, 1:] != xs[:, :-1]
    pos = np.arange(n)
    # each sorted position's tie group: its first and its last position
    first = np.maximum.accumulate(np.where(new, pos, 0), axis=-1)
    ends = np.ones_like(new)
    ends[:, :-1] = new[:, 1:]
    last = np.minimum.accumulate(np.where(ends, pos, n - 1)[:, ::-1], axis=-1)[:, ::-1]
    ranks = np.empty_like(x, dtype=float)
    np.put_along_axis(ranks, order, 0.5 * ((last + 1) + first + 1), axis=-1)
    return ranks


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Normal scores of ``(n, k)`` columns' average ranks (arviz-stats' ``_z_scale``)."""
    size = x.shape[0]
    ranks = _average_ranks(np.ascontiguousarray(x.T)).T
    return special.ndtri((ranks - _BLOM) / (size - 2 * _BLOM + 1))


def split_rank_diagnostics(
    values: np.ndarray, *, ess: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rank-normalized split R-hat and bulk ESS of every column of ``(chain, draw, ...)``.

    Parameters
    ----------
    values : np.ndarray
        ``(chain, draw, *shape)``, at least two chains; the trailing axes are the columns.
    ess : bool, default True
        Also the bulk ESS (else None in its place).

    Returns
    -------
    (rhat, ess) : tuple of np.ndarray
        Shape ``(k,)`` each (``k`` the columns), equal to ``azs.rhat(values,
        method="rank", chain_axis=0, draw_axis=1)`` and ``azs.ess(values, method="bulk",
        chain_axis=0, draw_axis=1)`` flattened (NaN for a column with a NaN, as there).
        With fewer than 8 draws per chain (a half shorter than arviz-stats' 4 draws) or no
        columns, both come from arviz-stats itself.
    """
    v = np.asarray(values, dtype=float)
    c, s = v.shape[:2]
    v = v.reshape(c, s, -1)
    k = v.shape[-1]
    if s < 8 or c < 2 or k == 0:
        with np.errstate(invalid="ignore", divide="ignore"):
            return (
                np.asarray(azs.rhat(v, method="rank", chain_axis=0, draw_axis=1), float).ravel(),
                np.asarray(azs.ess(v, method="bulk", chain_axis=0, draw_axis=1), float).ravel()
                if ess
                else None,
            )
    half = s // 2
    split = np.concatenate((v[:, :half], v[:, -half:]), axis=0)  # arviz's _split_chains
    flat = split.reshape(-1, k)
    bad = np.isnan(flat).any(axis=0)
    folded = np.abs(flat - np.median(flat, axis=0))
    shape = split.shape
    z_bulk, z_tail = _z_scale(flat).reshape(shape), _z_scale(folded).reshape(shape)
    z_bulk[..., bad] = np.nan
    z_tail[..., bad] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        bulk = np.asarray(azs.rhat(z_bulk, method="identity", chain_axis=0, draw_axis=1), float)
        tail = np.asarray(azs.rhat(z_tail, method="identity", chain_axis=0, draw_axis=1), float)
        e = (
            np.asarray(azs.ess(z_bulk, method="identity", chain_axis=0, draw_axis=1), float)
            if ess
            else None
        )
    # Python's max(bulk, tail), as arviz-stats takes it (NaN only where bulk is NaN)
    return np.where(tail > bulk, tail, bulk), e
