"""The Monte Carlo floor of a predictive TV against simulated mixtures with known noise."""

from __future__ import annotations

import numpy as np

from reports.predictive import predictive_tv
from reports.tv_floor import split_inflation, tv_floor


def _draws(rng, n_points: int, n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n, N, 2)`` class probabilities, p(class 1 | x, theta_s) ~ Beta(a_x, b_x) per draw."""
    p1 = rng.beta(a, b, size=(n, n_points))
    return np.stack([1 - p1, p1], axis=-1)


def test_the_floor_is_the_mean_tv_of_two_mixtures_of_one_predictive():
    # 300 points whose per-draw probabilities vary from diffuse (Beta(2, 2)) to confident
    # (Beta(1, 200)); two independent 200-draw mixtures per replicate, 40 replicates. The
    # mean TV's Monte Carlo error over 40 x 300 point-differences is about 1% of it; the
    # normal approximation of |difference| adds little at 200 draws: 5% is a tolerance a
    # wrong factor (sqrt(2/pi), the 1/2 of the TV, n instead of its square root) breaks.
    rng = np.random.default_rng(0)
    n_points, n = 300, 200
    a, b = np.geomspace(2, 1, n_points), np.geomspace(2, 200, n_points)
    tvs, floors = [], []
    for _ in range(40):
        q, s = _draws(rng, n_points, n, a, b), _draws(rng, n_points, n, a, b)
        tvs.append(predictive_tv(q.mean(0), s.mean(0)))
        floors.append(tv_floor(q.var(0, ddof=1), n, s.var(0, ddof=1), n))
    assert abs(np.mean(tvs) / np.mean(floors) - 1) < 0.05, (np.mean(tvs), np.mean(floors))


def test_a_confident_predictive_has_a_far_lower_floor_than_a_diffuse_one():
    rng = np.random.default_rng(1)
    n_points, n = 200, 500
    diffuse = _draws(rng, n_points, n, np.full(n_points, 2.0), np.full(n_points, 2.0))
    confident = _draws(rng, n_points, n, np.full(n_points, 1.0), np.full(n_points, 400.0))
    f_diffuse = tv_floor(diffuse.var(0, ddof=1), n, diffuse.var(0, ddof=1), n)
    f_confident = tv_floor(confident.var(0, ddof=1), n, confident.var(0, ddof=1), n)
    assert f_confident < f_diffuse / 30, (f_confident, f_diffuse)


def test_split_inflation_measures_the_autocorrelation_of_the_samples():
    # AR(1) draws of the logit with rho = 0.8 in each of 2 chains: the mixture's variance is
    # (1 + rho) / (1 - rho) = 9 times that of independent draws (for a long chain, nearly
    # linear probabilities: small logit spread). Independent draws give 1.
    rng = np.random.default_rng(2)
    n_points, n, rho = 400, 4000, 0.8
    for r_true, coef in ((1.0, 0.0), ((1 + rho) / (1 - rho), rho)):
        halves = []
        for _ in range(2):
            z = np.empty((n // 2, n_points))
            z[0] = rng.standard_normal(n_points)
            for t in range(1, n // 2):
                z[t] = coef * z[t - 1] + np.sqrt(1 - coef**2) * rng.standard_normal(n_points)
            p1 = 1 / (1 + np.exp(-0.3 * z))
            halves.append(np.stack([1 - p1, p1], axis=-1))
        all_draws = np.concatenate(halves)
        r = split_inflation(
            halves[0].mean(0), halves[1].mean(0), all_draws.var(0, ddof=1), n // 2, n // 2
        )
        # the squared half-differences average over 400 points: relative error ~ 1/sqrt(200)
        assert abs(r / r_true - 1) < 0.25, (r, r_true)
