"""The bilinear ridge target's exact moments: the 2-D quadrature against a 1-D route."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import norm

from reports.gaussian import kl_diag_full
from reports.ridge_target import RidgeTarget, bilinear_moments


def _moments_1d(y, s, mu, sd):
    """The same moments through ``b``'s marginal and ``a``'s conjugate conditional:
    p(b | y) ~ N(b; mu_b, sd_b) N(y; mu_a b, s^2 + sd_a^2 b^2), a | b ~ N(m(b), v(b))."""
    (ma, mb), (sa, sb) = mu, sd

    def pb(b):
        return norm.pdf(b, mb, sb) * norm.pdf(y, ma * b, np.sqrt(s * s + sa * sa * b * b))

    def v(b):
        return 1.0 / (1.0 / sa**2 + b * b / s**2)

    def m(b):
        return v(b) * (ma / sa**2 + b * y / s**2)

    lim = (mb - 12 * sb, mb + 12 * sb)

    def e(f):
        return quad(lambda b: f(b) * pb(b), *lim, limit=400, epsabs=1e-13)[0]

    z = e(lambda b: 1.0)
    ea, eb = e(m) / z, e(lambda b: b) / z
    eaa, ebb = e(lambda b: v(b) + m(b) ** 2) / z, e(lambda b: b * b) / z
    eab = e(lambda b: b * m(b)) / z
    cov = np.array([[eaa - ea * ea, eab - ea * eb], [eab - ea * eb, ebb - eb * eb]])
    return np.array([ea, eb]), cov


@pytest.mark.parametrize(
    "y, s, mu",
    [
        (0.5, 0.5, (0.0, 0.0)),
        (1.0, 0.5, (0.0, 0.0)),
        (2.0, 0.2, (0.5, -0.3)),
        (3.0, 0.5, (0.0, 0.0)),
    ],
)
def test_quadrature_matches_the_conjugate_route(y, s, mu):
    mean, cov = bilinear_moments(y, s, mu, (1.0, 1.5))
    m1, c1 = _moments_1d(y, s, mu, (1.0, 1.5))
    np.testing.assert_allclose(mean, m1, atol=1e-7)
    np.testing.assert_allclose(cov, c1, atol=1e-7)


def test_symmetric_prior_gives_mean_zero_and_the_ridge_correlation():
    mean, cov = bilinear_moments(1.0, 0.5)
    np.testing.assert_allclose(mean, 0.0, atol=1e-12)
    assert cov[0, 0] == pytest.approx(cov[1, 1], rel=1e-10)
    # E[ab] close to y, pulled towards 0 by the prior
    assert 0.5 < cov[0, 1] < 1.0
    # an uninformative observation leaves the prior
    mean, cov = bilinear_moments(1.0, 1e3, (0.3, -0.2), (1.0, 2.0))
    np.testing.assert_allclose(mean, [0.3, -0.2], atol=1e-4)
    np.testing.assert_allclose(cov, np.diag([1.0, 4.0]), atol=1e-4)


def test_ridge_target_assembles_blocks_in_flat_order():
    s = np.array([[2.0, 0.8], [0.8, 1.0]])
    t = RidgeTarget(np.array([0.5, 1.0]), 0.5, (0.0, 0.0), (1.0, 1.0), np.array([1.0, -1.0]), s)
    mean, cov = t.moments()
    assert t.dim == 6 and mean.shape == (6,) and cov.shape == (6, 6)
    _, pair = bilinear_moments(1.0, 0.5)
    np.testing.assert_allclose(cov[np.ix_([1, 3], [1, 3])], pair)
    np.testing.assert_allclose(cov[4:, 4:], s)
    assert cov[0, 1] == 0.0 and cov[0, 4] == 0.0
    assert t.kl() == pytest.approx(
        float(kl_diag_full(pair))
        + float(kl_diag_full(cov[np.ix_([0, 2], [0, 2])]))
        + float(kl_diag_full(s)),
        rel=1e-10,
    )
    draws = t.prior_draws(20000, seed=1, scale=2.0)
    np.testing.assert_allclose(draws[:, :4].std(0), 2.0, rtol=0.03)
    np.testing.assert_allclose(np.cov(draws[:, 4:].T), 4.0 * s, rtol=0.06)
