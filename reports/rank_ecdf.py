r"""Rank-ECDF differences of chains and their simultaneous band (Säilynoja et al. 2022).

Each chain's ECDF of its draws' fractional ranks among all chains, minus the uniform CDF
(:func:`rank_ecdf_difference`): chains that mix stay inside the simultaneous 95% band of
uniform ECDFs (:func:`ecdf_band`), a chain stuck elsewhere leaves it. Unlike rank
histograms, the picture stays readable with many chains.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, rankdata

__all__ = ["ecdf_band", "rank_ecdf_difference"]


def ecdf_band(
    n_draws: int, grid: np.ndarray, prob: float = 0.95, n_sim: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Simultaneous band of the ECDF of ``n_draws`` uniform values on ``grid``.

    The simulation method of Säilynoja, Bürkner & Vehtari (2022): the pointwise binomial
    band :math:`[F^{-1}_{\\mathrm{Bin}(n, z)}(\\gamma/2), F^{-1}_{\\mathrm{Bin}(n, z)}(1 -
    \\gamma/2)] / n` with :math:`\\gamma` chosen by simulation so that a whole ECDF of
    uniform draws stays inside with probability ``prob``. For the fractional ranks of one
    chain among several, whose draws are taken without replacement, the band is
    conservative.

    Parameters
    ----------
    n_draws : int
        Sample size :math:`n`.
    grid : numpy.ndarray
        Evaluation points in (0, 1).
    prob : float, default 0.95
        Simultaneous coverage.
    n_sim, seed : int
        Simulated uniform samples and their seed.

    Returns
    -------
    lower, upper : numpy.ndarray
        ECDF bounds at ``grid``.
    """
    grid = np.asarray(grid, dtype=float)
    rng = np.random.default_rng(seed)
    u = np.sort(rng.random((n_sim, n_draws)), axis=1)
    counts = np.stack([np.searchsorted(row, grid, side="right") for row in u])
    lo_tail = binom.cdf(counts, n_draws, grid)
    hi_tail = binom.sf(counts - 1, n_draws, grid)
    two_sided = np.minimum(1.0, 2 * np.minimum(lo_tail, hi_tail)).min(axis=1)
    gamma = float(np.quantile(two_sided, 1 - prob))
    lower = binom.ppf(gamma / 2, n_draws, grid) / n_draws
    upper = binom.ppf(1 - gamma / 2, n_draws, grid) / n_draws
    return lower, upper


def rank_ecdf_difference(values: np.ndarray, n_grid: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Per-chain ECDF of the fractional ranks minus the uniform CDF.

    Parameters
    ----------
    values : numpy.ndarray
        Draws of one parameter, shape ``(chain, draw)``.
    n_grid : int, default 50
        Evaluation points :math:`z_k = k / (n_{\\mathrm{grid}} + 1)`.

    Returns
    -------
    grid : numpy.ndarray
        Shape ``(n_grid,)``.
    diff : numpy.ndarray
        Shape ``(chain, n_grid)``: :math:`F_c(z) - z`, with :math:`F_c` the ECDF of chain
        :math:`c`'s ranks among all draws divided by their number. Near zero when the chains
        mix; a chain above the others sits low, one below sits high.
    """
    values = np.asarray(values, dtype=float)
    grid = np.arange(1, n_grid + 1) / (n_grid + 1)
    u = rankdata(values.ravel()).reshape(values.shape) / values.size
    ecdf = (u[:, :, None] <= grid[None, None, :]).mean(axis=1)
    return grid, ecdf - grid[None, :]
