r"""How much of an estimated KL(q_diag || q_full) the sampler's noise alone would give.

:func:`reports.gaussian.kl_diag_full` of a covariance estimated from ``S`` draws is biased
upward: even when the parameters are independent, the sample correlations between them are
not zero, and every one of the :math:`D(D-1)/2` pairs adds to the KL (about
:math:`D^2 / 4S` for independent draws). Draws from a Markov chain are autocorrelated, so the
spurious correlations are larger: two parameters that each wander slowly look correlated over
a short chain even when they are independent. A poorly mixing chain therefore shows a large
KL whatever the posterior is.

The *shift null* measures that noise on the draws themselves. Every parameter's series is
rotated circularly within its chain by its own random offset,

.. math::

    \tilde\theta^{(c)}_{s, i} = \theta^{(c)}_{(s + o_{c,i}) \bmod S,\, i},
    \qquad o_{c,i} \sim \mathcal{U}\{0, \dots, S - 1\},

which keeps each parameter's marginal distribution and autocorrelation (but for the one
wrap-around point) and breaks the alignment between parameters: the rotated draws are what
a chain with the same per-parameter mixing but *independent* parameters would give. The KL
of their covariance, averaged over a few rotations, is the null level; the KL of the real
draws minus it (``kl_excess``) is the part of the KL that the correlations between
parameters explain. Under independence the excess is 0 up to noise whatever the mixing;
with a well-mixed chain and strong correlations it approaches the true KL.

For independent Gaussian draws the bias is known in closed form and does not depend on the
covariance (:func:`reports.gaussian.kl_sampling_bias`), so the excess is then an unbiased
estimate of the population KL; the null of independent draws equals that closed form (both
tested). ``iid_draws`` turns the null of a chain back into the number of independent draws
with the same bias: what the chain's draws are worth to the covariance estimate.

NumPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from reports.gaussian import (
    CovMethod,
    closest_diagonal,
    fit_gaussian,
    iid_equivalent_draws,
    kl_diag_full,
)
from reports.wasserstein import w2_gaussian

__all__ = ["KLNull", "kl_shift_null", "shift_draws", "shift_null_iid_draws"]


class KLNull(NamedTuple):
    """The shift null of :func:`kl_shift_null`.

    Attributes
    ----------
    kl : float
        KL(q_diag || q_full) of the draws as given.
    null_mean, null_sd : float
        Mean and standard deviation of the KL over ``reps`` shifted copies.
    excess : float
        ``kl - null_mean``.
    reps : int
        Number of shifted copies.
    iid_draws : float or None
        How many independent Gaussian draws would give ``null_mean`` as the estimator's
        expected bias (:func:`reports.gaussian.iid_equivalent_draws`): the KL's own effective
        sample size. None (not applicable) unless ``cov="empirical"`` and two or more
        parameters (the closed form is for the sample covariance).
    w2_null_mean, w2_null_sd : float or None
        With ``w2=True``: mean and standard deviation over the shifted copies of the
        closed-form W2(q_diag, q_full) of each copy's Gaussian fit, the sampling floor of
        ``w2_diag_full`` (:func:`reports.wasserstein.w2_gaussian`); None otherwise.
    """

    kl: float
    null_mean: float
    null_sd: float
    excess: float
    reps: int
    iid_draws: float | None = None
    w2_null_mean: float | None = None
    w2_null_sd: float | None = None


def shift_draws(draws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rotate every column of every chain by its own random offset.

    Parameters
    ----------
    draws : np.ndarray
        Shape ``(C, S, D)``: chains, draws, parameters.
    rng : numpy.random.Generator

    Returns
    -------
    np.ndarray
        Same shape; ``out[c, s, i] = draws[c, (s + o[c, i]) % S, i]``.
    """
    x = np.asarray(draws)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    c, s, d = x.shape
    offsets = rng.integers(0, s, size=(c, 1, d))
    # a rotation is a window of the chain written twice: one strided gather, no modulo
    windows = sliding_window_view(np.concatenate((x, x), axis=1), s, axis=1)
    picked = windows[np.arange(c)[:, None], offsets[:, 0, :], np.arange(d)[None, :]]
    return np.ascontiguousarray(picked.transpose(0, 2, 1))


def kl_shift_null(
    draws: np.ndarray,
    *,
    chains: int = 1,
    cov: CovMethod = "empirical",
    jitter: float = 1e-6,
    reps: int = 8,
    seed: int = 0,
    w2: bool = False,
) -> KLNull:
    """KL(q_diag || q_full) of the draws, and of ``reps`` copies with each parameter shifted.

    Parameters
    ----------
    draws : np.ndarray
        Shape ``(S_total, D)`` with the chains one after another (chain-major, as
        :func:`reports.draws.flatten_sites` gives them), or ``(C, S, D)``.
    chains : int, default 1
        Number of chains in a 2-D ``draws``; shifts stay within each chain.
    cov, jitter
        Covariance estimator, as :func:`reports.gaussian.fit_gaussian`; the same for the
        draws and for the shifted copies.
    reps : int, default 8
        Number of shifted copies (at least 2).
    seed : int
        Seed of the offsets.
    w2 : bool, default False
        Also the closed-form W2 between q_diag and q_full of every shifted copy (one
        ``D x D`` matrix square root per copy): the floor of ``w2_diag_full``.

    Returns
    -------
    KLNull
    """
    x = _by_chain(draws, chains)
    if reps < 2:
        raise ValueError(f"reps must be at least 2 to give a spread, got {reps}")

    w2s: list[float] = []

    def kl_of(arr: np.ndarray, null: bool = False) -> float:
        fit = fit_gaussian(arr.reshape(-1, arr.shape[-1]), cov=cov, jitter=jitter)
        if w2 and null:
            var = closest_diagonal(fit.cov)
            w2s.append(w2_gaussian(fit.mean, np.diag(var), fit.mean, fit.cov))
        return float(kl_diag_full(fit.cov))

    rng = np.random.default_rng(seed)
    null = np.array([kl_of(shift_draws(x, rng), True) for _ in range(reps)])
    kl = kl_of(x)
    mean = float(null.mean())
    d = x.shape[-1]
    n_eq = iid_equivalent_draws(mean, d) if cov == "empirical" and d >= 2 else None
    w2_mean, w2_sd = (float(np.mean(w2s)), float(np.std(w2s, ddof=1))) if w2s else (None, None)
    return KLNull(kl, mean, float(null.std(ddof=1)), kl - mean, reps, n_eq, w2_mean, w2_sd)


def shift_null_iid_draws(
    draws: np.ndarray, *, jitter: float = 1e-6, reps: int = 4, seed: int = 0
) -> float | None:
    """``kl_shift_null(draws, cov="empirical", ...).iid_draws`` without the draws' own KL:
    what a stopping rule asks every round (the same offsets, the same number).

    ``draws``: ``(C, S, D)``. None with fewer than two parameters.
    """
    x = _by_chain(draws, 1)
    d = x.shape[-1]
    rng = np.random.default_rng(seed)
    kls = []
    for _ in range(reps):
        fit = fit_gaussian(shift_draws(x, rng).reshape(-1, d), cov="empirical", jitter=jitter)
        kls.append(float(kl_diag_full(fit.cov)))
    return iid_equivalent_draws(float(np.array(kls).mean()), d) if d >= 2 else None


def _by_chain(draws: np.ndarray, chains: int) -> np.ndarray:
    """``(C, S, D)`` float draws from ``(C * S, D)`` chain-major ones or ``(C, S, D)``."""
    x = np.asarray(draws, dtype=float)
    if x.ndim == 2:
        if chains < 1 or x.shape[0] % chains:
            raise ValueError(f"{x.shape[0]} draws do not split into {chains} equal chains")
        x = x.reshape(chains, x.shape[0] // chains, x.shape[1])
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (S, D) or (C, S, D), got {x.shape}")
    return x
