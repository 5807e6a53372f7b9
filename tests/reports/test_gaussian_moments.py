"""The moment-based path of reports.gaussian: the same numbers as the draws path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.gaussian import fit_gaussian, gaussian_from_moments
from reports.price_of_mf import diag_vs_full, diag_vs_full_moments


def _draws(s: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d)) / np.sqrt(d) + np.eye(d)
    return rng.normal(size=(s, d)) @ a.T + rng.normal(size=d) * 3


def test_gaussian_from_moments_is_the_empirical_fit():
    x = _draws(200, 5, seed=0)
    fit = fit_gaussian(x, cov="empirical", jitter=1e-4)
    mom = gaussian_from_moments(x.mean(0), np.cov(x, rowvar=False), 200, jitter=1e-4)
    np.testing.assert_allclose(mom.cov, fit.cov, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(mom.mean, fit.mean)
    assert (mom.cov_method, mom.jitter, mom.n_draws, mom.dim, mom.shrinkage) == (
        "empirical",
        1e-4,
        200,
        5,
        None,
    )


def test_moments_path_equals_draws_path_given_the_draws_moments():
    x = _draws(400, 6, seed=1)
    blocks = {"a": [0, 1, 2], "b": np.array([3, 4]), "c": slice(5, 6)}
    ref = diag_vs_full(x, blocks, jitter=1e-6, seed=3, w_max_draws=150)
    out = diag_vs_full_moments(
        x.mean(0),
        np.cov(x, rowvar=False),
        blocks,
        n_draws=400,
        jitter=1e-6,
        draws=x,
        seed=3,
        w_max_draws=150,
    )
    json.dumps(out)
    assert all(v is None or type(v) in (float, int, str) for v in out.values())
    for k, v in ref.items():
        key = k + "_kept" if k.startswith("w_") else k
        if isinstance(v, float):
            assert out[key] == pytest.approx(v, rel=1e-9, abs=1e-12), k
        else:
            assert out[key] == v, k
    assert set(out) == {k + "_kept" if k.startswith("w_") else k for k in ref}


def test_moments_path_without_draws_has_no_wasserstein_error():
    x = _draws(100, 3, seed=2)
    out = diag_vs_full_moments(x.mean(0), np.cov(x, rowvar=False), n_draws=100, suffix="_x")
    assert not any(k.startswith("w_") for k in out)
    assert out["kl_diag_full"] > 0 and out["w2_diag_full"] > 0
    with_draws = diag_vs_full_moments(
        x.mean(0), np.cov(x, rowvar=False), n_draws=100, draws=x[:50], suffix="_x"
    )
    assert with_draws["w_draws_x"] == 50 and with_draws["n_draws"] == 100


def test_moments_path_rejects_bad_input():
    cov = np.eye(3)
    with pytest.raises(ValueError, match=r"\(D,\) and cov \(D, D\)"):
        diag_vs_full_moments(np.zeros(2), cov, n_draws=10)
    with pytest.raises(ValueError, match="at least 2 draws"):
        gaussian_from_moments(np.zeros(3), cov, 1)
    with pytest.raises(ValueError, match="NaN"):
        gaussian_from_moments(np.full(3, np.nan), cov, 10)
    with pytest.raises(ValueError, match="columns"):
        diag_vs_full_moments(np.zeros(3), cov, n_draws=10, draws=np.ones((5, 2)))
