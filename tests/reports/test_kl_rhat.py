"""The KL's own R-hat (reports.kl_rhat): its gradient against finite differences of the KL,
its first-order expansion against group KLs, and R-hat on chains that agree or do not.

Fixed seeds. Iid Gaussian chains (8 x 1000 draws) mix by construction: the split R-hat of
any scalar sits within about 1/sqrt(8000) ~ 0.01 of 1 on R-hat^2 - 1, so < 1.01; half the
chains drawn from the diagonal of the same covariance (the KL's quantity of interest differs
by the whole KL, here ~1.5 nats against a per-group s.e. of ~0.05) must fail 1.05.
"""

from __future__ import annotations

import numpy as np

from reports.gaussian import kl_diag_full
from reports.kl_rhat import kl_gradient, kl_influence, kl_rhat

D = 8


def _cov(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(D, D))
    return a @ a.T / D + 0.5 * np.eye(D)


def test_the_gradient_is_the_kls_derivative() -> None:
    cov = _cov()
    e = np.random.default_rng(1).normal(size=(D, D))
    e = e + e.T
    h = 1e-6
    numeric = (kl_diag_full(cov + h * e) - kl_diag_full(cov - h * e)) / (2 * h)
    assert np.isclose(numeric, np.sum(kl_gradient(cov) * e), rtol=1e-6, atol=1e-9)


def test_the_influence_values_predict_a_groups_kl_to_first_order() -> None:
    rng = np.random.default_rng(2)
    cov = _cov()
    x = rng.multivariate_normal(np.zeros(D), cov, size=(4, 20000))
    psi = kl_influence(x, jitter=0.0)
    y = x.reshape(-1, D) - x.reshape(-1, D).mean(0)
    pooled = y.T @ y / (y.shape[0] - 1)
    g = kl_gradient(pooled)
    base = kl_diag_full(pooled)
    for c in range(4):
        yc = x[c] - x[c].mean(0)
        own = kl_diag_full(yc.T @ yc / (yc.shape[0] - 1))
        linear = base + psi[c].mean() - np.sum(g * pooled)
        # the groups differ from the pool by O(1/sqrt(n)); the remainder is O(1/n)
        assert abs(own - linear) < 0.1 * abs(own - base) + 5e-3


def test_chains_that_agree_pass_and_chains_that_do_not_fail() -> None:
    rng = np.random.default_rng(3)
    cov = _cov()
    chol = np.linalg.cholesky(cov)
    x = rng.normal(size=(8, 1000, D)) @ chol.T
    ids = [0, 0, 1, 1, 2, 2, 3, 3]
    good = kl_rhat(x, ids)
    assert good.rhat < 1.01 and good.rhat_nested < 1.01
    bad = x.copy()
    bad[4:] = rng.normal(size=(4, 1000, D)) * np.sqrt(np.diag(cov))
    worse = kl_rhat(bad, ids)
    assert worse.rhat > 1.05 and worse.rhat_nested > 1.05
    assert kl_rhat(x[:1]) == (None, None)
    assert kl_rhat(x).rhat_nested is None
