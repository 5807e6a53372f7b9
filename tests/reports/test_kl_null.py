"""Tests for reports.kl_null: the shift null of the KL(q_diag || q_full) estimator."""

from __future__ import annotations

import numpy as np
import pytest

from reports.gaussian import closest_diagonal, kl_diag_full, kl_sampling_bias
from reports.kl_null import kl_shift_null, shift_draws, shift_null_iid_draws


def _ar1(rng: np.random.Generator, s: int, d: int, phi: float) -> np.ndarray:
    """``d`` independent stationary AR(1) series of length ``s`` with unit variance."""
    x = np.empty((s, d))
    x[0] = rng.normal(size=d)
    eps = rng.normal(size=(s, d)) * np.sqrt(1 - phi**2)
    for t in range(1, s):
        x[t] = phi * x[t - 1] + eps[t]
    return x


def test_shift_draws_rotates_each_column_within_its_chain():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 7, 3))
    y = shift_draws(x, np.random.default_rng(1))
    assert y.shape == x.shape
    for c in range(2):
        for i in range(3):
            rotations = [np.roll(x[c, :, i], -k) for k in range(7)]
            assert any(np.array_equal(y[c, :, i], r) for r in rotations)
    assert np.array_equal(y, shift_draws(x, np.random.default_rng(1)))
    # out[c, s, i] = x[c, (s + o[c, i]) % S, i], offsets drawn as (C, 1, D) integers
    offsets = np.random.default_rng(1).integers(0, 7, size=(2, 1, 3))
    rows = (np.arange(7)[None, :, None] + offsets) % 7
    assert np.array_equal(y, np.take_along_axis(x, rows, axis=1))
    assert y.flags.c_contiguous


def test_the_stopping_rules_null_is_the_full_nulls_number():
    """The rule's null-only path gives kl_shift_null's iid_draws, bit for bit."""
    x = np.stack([_ar1(np.random.default_rng(c), 120, 6, 0.8) for c in range(4)])
    full = kl_shift_null(x, reps=4, seed=11, jitter=1e-6)
    assert shift_null_iid_draws(x, reps=4, seed=11, jitter=1e-6) == full.iid_draws
    assert shift_null_iid_draws(x[..., :1], reps=4, seed=11) is None


def test_independent_draws_have_no_excess():
    # iid N(0, I): the raw KL is pure estimator bias (about D^2 / 4S); the null has it too.
    rng = np.random.default_rng(0)
    res = kl_shift_null(rng.normal(size=(1000, 30)), reps=8, seed=1)
    assert res.kl > 0.1  # the bias is real ...
    assert abs(res.excess) < 4 * res.null_sd + 0.05  # ... and the null accounts for it


def test_null_of_iid_draws_is_the_closed_form_bias():
    # Over 20 seeds the null of 1000 iid draws in 30 dimensions had mean 0.2211 (closed form
    # 0.2222) and sd 0.0045, i.e. iid_draws 1005 with sd 20; 5 sd bounds.
    res = kl_shift_null(np.random.default_rng(7).normal(size=(2, 500, 30)), reps=8, seed=7)
    assert res.null_mean == pytest.approx(kl_sampling_bias(1000, 30), abs=5 * 0.0045)
    assert res.iid_draws == pytest.approx(1000, abs=5 * 20)
    # A slowly mixing chain is worth far fewer independent draws than it has.
    slow = kl_shift_null(_ar1(np.random.default_rng(8), 1000, 30, phi=0.9), reps=8, seed=0)
    assert slow.iid_draws < 300
    shrunk = kl_shift_null(np.random.default_rng(7).normal(size=(1000, 30)), cov="ledoit_wolf")
    assert shrunk.iid_draws is None  # not applicable: not NaN, which means a failure


def test_autocorrelated_independent_parameters_inflate_kl_but_not_the_excess():
    # Slowly mixing but independent parameters: the raw KL is several times the iid level,
    # the shift null reproduces it, the excess is noise.
    rng = np.random.default_rng(2)
    iid = kl_shift_null(rng.normal(size=(1000, 20)), reps=8, seed=0)
    slow = kl_shift_null(_ar1(rng, 1000, 20, phi=0.97), reps=8, seed=0)
    assert slow.kl > 5 * iid.kl
    assert abs(slow.excess) < 4 * slow.null_sd + 0.1 * slow.null_mean


def test_correlated_draws_keep_the_true_kl_as_excess():
    rng = np.random.default_rng(3)
    d = 8
    a = rng.normal(size=(d, d))
    cov = a @ a.T / d + 0.2 * np.eye(d)
    true_kl = kl_diag_full(cov)
    assert np.all(closest_diagonal(cov) > 0) and true_kl > 1.0
    draws = rng.multivariate_normal(np.zeros(d), cov, size=(2, 2000))
    res = kl_shift_null(draws, reps=8, seed=0)
    # Bias of the estimate and the null are both about D^2 / 4S = 0.004 here.
    assert res.null_mean < 0.05
    assert res.excess == pytest.approx(true_kl, rel=0.1)


def test_chains_reshape_and_bad_input():
    x = np.random.default_rng(0).normal(size=(100, 4))
    a = kl_shift_null(x, chains=2, reps=3, seed=0)
    b = kl_shift_null(x.reshape(2, 50, 4), reps=3, seed=0)
    assert a == b
    with pytest.raises(ValueError, match="equal chains"):
        kl_shift_null(x, chains=3)
    with pytest.raises(ValueError, match="reps"):
        kl_shift_null(x, reps=1)


def test_kl_null_figure_draws_one_line_per_curve():
    from reports.figures.kl_null import kl_null_figure

    fig = kl_null_figure(
        {"KL": ([1, 2], [3.0, 2.0], [0.1, 0.2]), "shift null": ([1, 2], [1.0, 1.0], [0.0, 0.0])}
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["KL", "shift null"]
    assert ax.lines[0].get_linestyle() == "-"
    with pytest.raises(ValueError, match="at least one"):
        kl_null_figure({})


def test_w2_null_is_the_floor_of_the_closed_form_w2():
    # Independent Gaussian draws: the closed-form W2(q_diag, q_full) of the draws themselves
    # is pure sampling noise, so it must sit within the shifted copies' spread; with a
    # strongly correlated target it must stand far above that floor.
    from reports.gaussian import closest_diagonal, fit_gaussian
    from reports.wasserstein import w2_gaussian

    rng = np.random.default_rng(5)
    d, c, s = 6, 4, 200
    iid = rng.standard_normal((c, s, d))
    null = kl_shift_null(iid, reps=16, seed=1, w2=True)
    fit = fit_gaussian(iid.reshape(-1, d))
    w2 = w2_gaussian(fit.mean, np.diag(closest_diagonal(fit.cov)), fit.mean, fit.cov)
    assert null.w2_null_mean > 0
    assert abs(w2 - null.w2_null_mean) < 4 * null.w2_null_sd
    corr = np.full((d, d), 0.9) + 0.1 * np.eye(d)
    x = rng.multivariate_normal(np.zeros(d), corr, size=(c, s))
    null_c = kl_shift_null(x, reps=8, seed=1, w2=True)
    fit_c = fit_gaussian(x.reshape(-1, d))
    w2_c = w2_gaussian(fit_c.mean, np.diag(closest_diagonal(fit_c.cov)), fit_c.mean, fit_c.cov)
    assert w2_c > null_c.w2_null_mean + 10 * null_c.w2_null_sd
    assert kl_shift_null(iid, reps=2).w2_null_mean is None
