"""The batched GIG sampler against ``scipy.stats.geninvgauss`` and the exact moments.

Each case draws with a fixed seed; the means of :math:`X` and :math:`1/X` are compared with
their exact values (ratios of Bessel functions) within 5 Monte Carlo standard errors from
the exact variances, and the draws with scipy's CDF by a Kolmogorov-Smirnov test.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
import scipy.stats as st
import torch

from zoo.inference.mcmc.gig import gig

#: (p, omega): each of Hörmann & Leydold's three regions, negative p, and extremes of both.
CASES = [
    (0.5, 1.0),
    (-0.5, 1.0),
    (2.0, 0.7),  # mode-shifted ratio of uniforms (p >= 1)
    (0.2, 0.6),  # ratio of uniforms without the shift
    (0.3, 0.1),  # the three-piece hat
    (0.0, 1e-6),  # the hat's logarithmic case, tiny omega
    (0.99, 0.01),
    (1e-9, 0.05),  # p -> 0 reaches the logarithmic case continuously
    (3.5, 1e-3),
    (-3.0, 1e-8),
    (-20.0, 50.0),
    (50.0, 1e4),
    (0.0, 1e5),
]


def _bessel_ratio(p: float, k: int, om: float) -> float:
    """:math:`E[Y^k] = K_{p+k}(\\omega) / K_p(\\omega)` for the one-parameter law."""
    return float(np.exp(np.log(sc.kve(p + k, om)) - np.log(sc.kve(p, om))))


def _mc_z(x: np.ndarray, p: float, k: int, om: float, scale: float = 1.0) -> float:
    """The mean of ``x ** k`` in exact Monte Carlo standard errors from its truth."""
    m1 = scale**k * _bessel_ratio(p, k, om)
    m2 = scale ** (2 * k) * _bessel_ratio(p, 2 * k, om)
    return float((np.mean(x**k) - m1) / np.sqrt((m2 - m1**2) / len(x)))


@pytest.mark.parametrize(("p", "om"), CASES)
def test_gig_matches_the_exact_moments_and_scipy(p: float, om: float) -> None:
    gen = torch.Generator().manual_seed(7)
    x = gig(torch.full((4000,), p), om, om, gen).numpy()
    assert x.dtype == np.float64 and np.all(np.isfinite(x)) and np.all(x > 0)
    assert abs(_mc_z(x, p, 1, om)) < 5
    assert abs(_mc_z(x, p, -1, om)) < 5
    assert st.kstest(x[:1000], st.geninvgauss(p, om).cdf).pvalue > 1e-3


def test_gig_three_parameters_and_broadcasting() -> None:
    """(p, a, b) with a != b is eta times the one-parameter law (eta = sqrt(b / a)), one
    parameter per element; the draws follow scipy's with scale eta."""
    gen = torch.Generator().manual_seed(3)
    p = torch.tensor([[1.5], [-2.0]])  # (2, 1) against (3,): (2, 3) parameters
    a, b = torch.tensor([0.5, 4.0, 1e-3]), torch.tensor([2.0, 0.25, 10.0])
    x = gig(p.expand(2, 3).unsqueeze(-1), a.unsqueeze(-1), b.unsqueeze(-1).expand(3, 3000), gen)
    assert x.shape == (2, 3, 3000)
    for i in range(2):
        for j in range(3):
            pi, aj, bj = float(p[i, 0]), float(a[j]), float(b[j])
            om, eta = np.sqrt(aj * bj), np.sqrt(bj / aj)
            xs = x[i, j].numpy()
            assert abs(_mc_z(xs, pi, 1, om, eta)) < 5
            assert st.kstest(xs[:800], st.geninvgauss(pi, om, scale=eta).cdf).pvalue > 1e-3


def test_gig_is_reproducible_and_refuses_bad_parameters() -> None:
    draw = [gig(0.5, torch.ones(50), 2.0, torch.Generator().manual_seed(1)) for _ in range(2)]
    assert torch.equal(draw[0], draw[1])
    with pytest.raises(ValueError, match="a > 0"):
        gig(0.5, torch.tensor([1.0, 0.0]), 1.0, torch.Generator())
