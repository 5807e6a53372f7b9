"""Estimators the microcanonical samplers' tunings read: each chain's effective sample size
of each coordinate (Geyer's initial monotone sequence, as BlackJAX's
``diagnostics.py::effective_sample_size`` on one chain) and weighted moments' variances.

References
----------
Geyer, C. J. (1992). Practical Markov chain Monte Carlo. Statistical Science 7(4).
"""

from __future__ import annotations

import math

import torch

__all__ = ["ess_per_chain", "moment_variances"]


def ess_per_chain(x: torch.Tensor) -> torch.Tensor:
    r"""Each chain's effective sample size of each coordinate, Geyer's initial monotone
    sequence (Stan's and BlackJAX's ``effective_sample_size`` on one chain).

    Parameters
    ----------
    x : Tensor
        ``(C, n, D)`` draws, ``n >= 2``.

    BlackJAX's ``diagnostics.py::effective_sample_size`` on one chain, term for term: the
    autocorrelations by FFT, the initial positive sequence of pair sums made monotone, the
    next even term where positive, :math:`\hat\tau \ge 1/\log_{10} n`.

    Returns
    -------
    Tensor
        ``(C, D)`` float64; 0 where a coordinate never moved (as BlackJAX since #1020).
    """
    x = x.to(torch.float64)
    c, n, d = x.shape
    xc = x - x.mean(1, keepdim=True)
    m = 1 << (2 * n - 1).bit_length()
    f = torch.fft.rfft(xc, n=m, dim=1)
    acov = torch.fft.irfft(f * f.conj(), n=m, dim=1)[:, :n] / n
    var0 = acov[:, 0] * n / (n - 1)
    moved = (x != x[:, :1]).any(1) & (var0 > 0)
    weighted = torch.where(moved, acov[:, 0], torch.ones_like(var0)).unsqueeze(1)
    ne = n - n % 2
    lagged = 1 - (var0.unsqueeze(1) - acov[:, 1:ne]) / weighted
    rho = torch.cat([torch.ones(c, 1, d, dtype=x.dtype, device=x.device), lagged], 1)
    even = rho[:, 0::2]
    pairs = even + rho[:, 1::2]
    m = pairs.shape[1]
    initial = torch.cumprod((pairs > 0).to(x.dtype), dim=1)
    # Stan's and BlackJAX's extra even term after the positive pairs, when positive
    first_bad = initial.sum(1).long().clamp(max=m - 1).unsqueeze(1)
    extra = even.gather(1, first_bad).squeeze(1)
    has_extra = (initial.sum(1) < m) & (extra > 0)
    seq = pairs * initial
    seq = seq.scatter(
        1, first_bad, torch.where(has_extra, extra, seq.gather(1, first_bad)[:, 0])[:, None]
    )
    monotone = torch.cummin(seq, dim=1).values
    last = monotone.gather(1, first_bad).squeeze(1)
    lowered = last < extra
    correction = torch.where(has_extra, torch.where(lowered, last / 2, extra), 0.0)
    tau = -1 + 2 * monotone.sum(1) - correction
    tau = torch.clamp(tau, min=1 / math.log10(n))
    return torch.where(moved, n / tau, torch.zeros_like(tau))


def moment_variances(
    s0: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor, fallback: torch.Tensor
) -> torch.Tensor:
    """:math:`E_w[x^2] - E_w[x]^2` of weighted sums ``(C, 1)``, ``(C, D)``, ``(C, D)``;
    ``fallback`` where that is not a positive finite number (no kept step, a coordinate
    that never moved): a zero variance would freeze the coordinate."""
    w = torch.clamp(s0, min=1e-300)
    var = s2 / w - (s1 / w) ** 2
    ok = torch.isfinite(var) & (var > 0) & (s0 > 0)
    return torch.where(ok, var, fallback.to(var.dtype))
