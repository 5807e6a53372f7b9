r"""Running means and sums of squared deviations: Welford's update, Chan's merge, Stan's
regularization.

One estimate is :class:`Welford` ``(count, mean, m2)``, :math:`m_2 = \sum_i (x_i - \bar
x)^2` (or the co-moment :math:`\sum_i (x_i - \bar x)(x_i - \bar x)^\top`). Two updates:

- :func:`welford_update` (Welford 1962): one new row per estimate, for a batch of estimates
  at once (``mean`` of shape ``(C, D)``: chain ``c``'s estimate takes row ``c`` of ``z``),

  .. math:: \bar x_n = \bar x_{n-1} + \frac{x_n - \bar x_{n-1}}{n}, \qquad
            m_{2,n} = m_{2,n-1} + (x_n - \bar x_{n-1})(x_n - \bar x_n);

- :func:`chan_merge` (Chan, Golub & LeVeque 1979): all rows of a batch of :math:`n_b` rows
  (mean :math:`\bar x_b`, :math:`M_b` about its own mean) join one estimate of :math:`n_a`
  rows,

  .. math:: \delta = \bar x_b - \bar x_a, \quad
            \bar x = \bar x_a + \delta \frac{n_b}{n_a + n_b}, \quad
            M = M_a + M_b + \delta \delta^\top \frac{n_a n_b}{n_a + n_b}

  (diagonal: :math:`\delta^2` and squared deviations; ``full``: the co-moment matrix).

:func:`regularized_variance` is Stan's shrinkage of the windowed variance estimate towards
:math:`10^{-3}`: :math:`\frac{n}{n + 5}\hat\sigma^2 + 10^{-3}\frac{5}{n + 5}`,
:math:`\hat\sigma^2 = m_2 / (n - 1)`.

Users: the window adaptation (per-chain Welford, Pyro's ``WelfordCovariance`` order), ChEES's
pooled mass matrix (Chan, diagonal, all chains' states in one estimate) and
:mod:`~zoo.inference.mcmc.streaming` (per-chain Welford and per-group full co-moments).
How a multiply-add is rounded differs between the users and is kept so that no number
moves: Pyro's order and the ChEES mass matrix multiply then add (two roundings); the
streaming moments use torch's fused kernels (``addcmul``, ``add(alpha=)``, ``addmm``,
``addr``): :func:`welford_update` ``fused=True`` and :func:`chan_merge` ``full=True``.

References
----------
Welford, B. P. (1962). Note on a method for calculating corrected sums of squares and
products. Technometrics 4, 419-420.

Chan, T. F., Golub, G. H. and LeVeque, R. J. (1979). Updating formulae and a pairwise
algorithm for computing sample variances. Stanford CS report STAN-CS-79-773.

Stan Development Team. Stan Reference Manual, "HMC algorithm parameters" (the
regularization of the adapted metric).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Welford", "chan_merge", "regularized_variance", "welford_init", "welford_update"]


class Welford(NamedTuple):
    """A running estimate (or a batch of them along the leading dimensions)."""

    count: int
    """Rows in the estimate (one number for the whole batch)."""
    mean: torch.Tensor
    """``(..., D)`` running mean."""
    m2: torch.Tensor
    """``(..., D)`` sum of squared deviations, or ``(D, D)`` co-moment (``full``)."""


def welford_init(
    shape: tuple[int, ...],
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    full: bool = False,
) -> Welford:
    """An empty estimate of means of ``shape`` (``full``: with a ``(D, D)`` co-moment)."""
    m2_shape = (*shape, shape[-1]) if full else shape
    return Welford(
        0,
        torch.zeros(shape, dtype=dtype, device=device),
        torch.zeros(m2_shape, dtype=dtype, device=device),
    )


def welford_update(state: Welford, z: torch.Tensor, *, fused: bool = False) -> Welford:
    """Welford's update with one new row per estimate: ``z`` has ``state.mean``'s shape."""
    n = state.count + 1
    delta = z - state.mean
    mean = state.mean + delta / n
    m2 = torch.addcmul(state.m2, delta, z - mean) if fused else state.m2 + delta * (z - mean)
    return Welford(n, mean, m2)


def chan_merge(state: Welford, batch: torch.Tensor, *, full: bool = False) -> Welford:
    """Chan's merge of all ``n_b`` rows of ``batch`` ``(n_b, D)`` into one estimate ``(D,)``.

    Diagonal: a new estimate, two roundings per multiply-add. ``full`` (a ``(D, D)``
    co-moment): ``state.mean`` and ``state.m2`` are updated in place (they may be views into
    the caller's buffers; BLAS rounds ``addmm_`` on a view as it does there) with torch's
    fused ``add_(alpha=)``, ``addmm_`` and ``addr_``, and returned.
    """
    nb = batch.shape[0]
    na = state.count
    n = na + nb
    mb = batch.mean(0)
    xc = batch - mb
    delta = mb - state.mean
    if full:  # in place: no (D, D) temporary, and the rounding of BLAS on the caller's storage
        mean = state.mean.add_(delta, alpha=nb / n)
        m2 = state.m2.addmm_(xc.T, xc).addr_(delta, delta, alpha=na * nb / n)
    else:
        mean = state.mean + delta * (nb / n)
        m2 = state.m2 + (xc * xc).sum(0) + delta * delta * (na * nb / n)
    return Welford(n, mean, m2)


def regularized_variance(state: Welford) -> torch.Tensor:
    """Stan's :math:`\\frac{n}{n+5}\\hat\\sigma^2 + 10^{-3}\\frac{5}{n+5}` of the estimate.

    Raises
    ------
    RuntimeError
        With fewer than 2 rows (no variance to estimate).
    """
    n = state.count
    if n < 2:
        raise RuntimeError("Insufficient samples to estimate covariance")
    return (n / (n + 5.0)) * (state.m2 / (n - 1)) + 1e-3 * (5.0 / (n + 5.0))
