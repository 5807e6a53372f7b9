"""reports.laplace: the price of mean field of N(m, H^-1) from the precision H."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import inv, sqrtm
from scipy.optimize import minimize

from reports.gaussian import kl_diag_full
from reports.laplace import (
    kl_diag_full_precision,
    laplace_diag_vs_full,
    w2_diag_full_precision,
)


def _spd(d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    return a @ a.T / d + 0.3 * np.eye(d)


def _kl_gauss(s0: np.ndarray, s1: np.ndarray) -> float:
    """KL(N(0, s0) || N(0, s1)), the textbook formula."""
    d = len(s0)
    return 0.5 * (
        np.trace(np.linalg.solve(s1, s0)) - d + np.linalg.slogdet(s1)[1] - np.linalg.slogdet(s0)[1]
    )


def test_kl_is_that_of_the_kl_optimal_diagonal_gaussian():
    h = _spd(6, 0)
    cov = inv(h)
    # the best diagonal Gaussian found by a numerical search over its log variances
    best = minimize(lambda lv: _kl_gauss(np.diag(np.exp(lv)), cov), np.zeros(6), tol=1e-12)
    assert kl_diag_full_precision(h) == pytest.approx(best.fun, rel=1e-6)
    np.testing.assert_allclose(np.exp(best.x), 1 / np.diag(h), rtol=1e-4)
    assert kl_diag_full_precision(h) == pytest.approx(kl_diag_full(cov), rel=1e-10)
    assert kl_diag_full_precision(np.diag([1.0, 2.0, 3.0])) == 0.0


def test_w2_matches_the_matrix_square_root_formula():
    h = _spd(5, 1)
    a, b = np.diag(1 / np.diag(h)), inv(h)
    ra = sqrtm(a).real
    w2sq = np.trace(a) + np.trace(b) - 2 * np.trace(sqrtm(ra @ b @ ra).real)
    assert w2_diag_full_precision(h) == pytest.approx(np.sqrt(w2sq), rel=1e-6)


def test_blocks_conditional_and_marginal():
    h = _spd(7, 2)
    blocks = {"a": slice(0, 3), "b": [3, 4, 5, 6]}
    res = laplace_diag_vs_full(h, blocks)
    assert res["dim"] == 7 and res["min_eig"] == pytest.approx(np.linalg.eigvalsh(h)[0])
    assert res["kl"] == pytest.approx(kl_diag_full_precision(h))
    assert res["kl_a"] == pytest.approx(kl_diag_full_precision(h[:3, :3]))
    assert res["w2_b"] == pytest.approx(w2_diag_full_precision(h[3:, 3:]))
    assert res["kl_marginal_b"] == pytest.approx(kl_diag_full(inv(h)[3:, 3:]))
    assert kl_diag_full_precision(h, blocks)["a"] == pytest.approx(res["kl_a"])


def test_an_indefinite_matrix_gives_nan_and_its_smallest_eigenvalue():
    h = np.diag([1.0, -2.0, 3.0])
    res = laplace_diag_vs_full(h, {"x": slice(0, 2)})
    assert res["min_eig"] == pytest.approx(-2.0)
    assert np.isnan(res["kl"]) and np.isnan(res["w2"]) and np.isnan(res["kl_marginal_x"])
    with pytest.raises(ValueError, match="not positive definite"):
        kl_diag_full_precision(h)
