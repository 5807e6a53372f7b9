"""Tests for reports.calibration against hand-computed values."""

import numpy as np
import pytest
from scipy.stats import norm

from reports.calibration import (
    accuracy,
    brier,
    classification_metrics,
    ece,
    nll,
    predictive_log_probs,
    regression_metrics,
)


def test_predictive_log_probs_identical_draws_equal_single_draw():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4), size=6)  # (N, C)
    lp = np.log(p)
    stacked = np.stack([lp, lp, lp])
    np.testing.assert_allclose(predictive_log_probs(stacked), lp, atol=1e-12)


def test_predictive_log_probs_two_draws_is_log_of_average():
    p1 = np.array([[0.9, 0.1], [0.2, 0.8]])
    p2 = np.array([[0.5, 0.5], [0.6, 0.4]])
    out = predictive_log_probs(np.log(np.stack([p1, p2])))
    np.testing.assert_allclose(out, np.log([[0.7, 0.3], [0.4, 0.6]]), atol=1e-12)


def test_predictive_log_probs_is_stable_for_tiny_probabilities():
    lp = np.array([[[-1000.0, 0.0]], [[-1000.0, 0.0]]])
    np.testing.assert_allclose(predictive_log_probs(lp), [[-1000.0, 0.0]])


def test_predictive_log_probs_rejects_wrong_rank():
    with pytest.raises(ValueError, match=r"\(S, N, C\)"):
        predictive_log_probs(np.zeros((3, 2)))


def test_accuracy_and_nll_hand_computed():
    probs = np.array([[0.7, 0.3], [0.4, 0.6], [0.8, 0.2]])
    y = np.array([0, 0, 0])
    assert accuracy(probs, y) == pytest.approx(2 / 3)
    expected = -(np.log(0.7) + np.log(0.4) + np.log(0.8)) / 3
    assert nll(np.log(probs), y) == pytest.approx(expected)


def test_brier_onehot_correct_is_zero_and_uniform_is_one_minus_one_over_c():
    y = np.array([0, 2, 1, 2])
    onehot = np.eye(3)[y]
    assert brier(onehot, y) == pytest.approx(0.0)
    for c in (2, 3, 10):
        yc = np.arange(5) % c
        assert brier(np.full((5, c), 1 / c), yc) == pytest.approx(1 - 1 / c)


def test_brier_hand_computed():
    # (0.7-1)^2 + 0.3^2 = 0.18 ; 0.4^2 + (0.6-1)^2 = 0.32 -> mean 0.25
    probs = np.array([[0.7, 0.3], [0.4, 0.6]])
    assert brier(probs, np.array([0, 1])) == pytest.approx(0.25)


def test_ece_perfectly_calibrated_bins_is_zero():
    # bin with confidence 0.8: 4 of 5 correct; bin with confidence 0.6: 3 of 5 correct
    p_hi = np.tile([0.8, 0.2], (5, 1))
    p_lo = np.tile([0.6, 0.4], (5, 1))
    probs = np.vstack([p_hi, p_lo])
    y = np.array([0, 0, 0, 0, 1, 0, 0, 0, 1, 1])
    assert ece(probs, y) == pytest.approx(0.0, abs=1e-12)


def test_ece_miscalibrated_hand_computed():
    # bin A: conf 0.9, 2 points, 1 correct -> |0.5-0.9| = 0.4, weight 2/5
    # bin B: conf 0.7, 3 points, 3 correct -> |1.0-0.7| = 0.3, weight 3/5
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.3, 0.7], [0.3, 0.7], [0.7, 0.3]])
    y = np.array([0, 1, 1, 1, 0])
    assert ece(probs, y) == pytest.approx(2 / 5 * 0.4 + 3 / 5 * 0.3)


def test_ece_bins_are_closed_on_the_right():
    # with 2 bins (0, 0.5] and (0.5, 1], confidence exactly 0.5 lands in the low bin
    # together with 0.3-confidence points (3 classes so max prob can be below 0.5)
    probs = np.array([[0.5, 0.25, 0.25], [0.4, 0.3, 0.3], [1.0, 0.0, 0.0]])
    y = np.array([0, 1, 0])
    # low bin: conf mean 0.45, acc 0.5 -> 2/3 * 0.05 ; high bin: conf 1, acc 1 -> 0
    assert ece(probs, y, n_bins=2) == pytest.approx(2 / 3 * 0.05)
    # if 0.5 went to the high bin: 1/3*|0-0.4| + 2/3*|1-0.75| = 0.3 instead
    assert ece(probs, y, n_bins=2) != pytest.approx(0.3)


def test_ece_single_bin_is_abs_accuracy_minus_mean_confidence():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(3), size=50)
    y = rng.integers(0, 3, size=50)
    expected = abs(accuracy(probs, y) - probs.max(axis=1).mean())
    assert ece(probs, y, n_bins=1) == pytest.approx(expected)


def test_label_validation_names_the_problem():
    with pytest.raises(ValueError, match="class labels"):
        accuracy(np.array([[0.5, 0.5]]), np.array([2]))
    with pytest.raises(ValueError, match="shape"):
        brier(np.array([[0.5, 0.5]]), np.array([0, 1]))


def test_classification_metrics_uses_the_mixture():
    p1 = np.array([[0.9, 0.1], [0.2, 0.8]])
    p2 = np.array([[0.5, 0.5], [0.6, 0.4]])
    y = np.array([0, 1])
    out = classification_metrics(np.log(np.stack([p1, p2])), y)
    assert set(out) == {"accuracy", "nll", "brier", "ece"}
    mix = np.array([[0.7, 0.3], [0.4, 0.6]])
    assert out["accuracy"] == pytest.approx(1.0)
    assert out["nll"] == pytest.approx(-(np.log(0.7) + np.log(0.6)) / 2)
    assert out["brier"] == pytest.approx(brier(mix, y))
    assert out["ece"] == pytest.approx(ece(mix, y))
    assert all(isinstance(v, float) for v in out.values())


def test_regression_single_draw_matches_gaussian_density_with_units():
    rng = np.random.default_rng(2)
    n = 7
    loc = rng.normal(size=(1, n))
    scale = rng.uniform(0.5, 2.0, size=(1, n))
    y = rng.normal(size=n)
    a, b = 3.5, -10.0
    out = regression_metrics(loc, scale, y, y_scale=a, y_shift=b)
    expected_nll = -np.mean(norm.logpdf(a * y + b, loc=a * loc[0] + b, scale=a * scale[0]))
    assert out["nll"] == pytest.approx(expected_nll)
    # equivalently: standardized nll + log(a)
    std_nll = -np.mean(norm.logpdf(y, loc=loc[0], scale=scale[0]))
    assert out["nll"] == pytest.approx(std_nll + np.log(a))
    assert out["rmse"] == pytest.approx(a * np.sqrt(np.mean((loc[0] - y) ** 2)))


def test_regression_mixture_and_scale_shapes():
    loc = np.array([[0.0, 1.0], [2.0, 1.0]])
    y = np.array([1.0, 0.0])
    sig = np.array([[1.0], [2.0]])  # (S, 1): one noise scale per draw
    out = regression_metrics(loc, sig, y)
    dens = 0.5 * (norm.pdf(y, loc=loc[0], scale=1.0) + norm.pdf(y, loc=loc[1], scale=2.0))
    assert out["nll"] == pytest.approx(-np.mean(np.log(dens)))
    # predictive mean is [1, 1] -> errors [0, 1]
    assert out["rmse"] == pytest.approx(np.sqrt(0.5))
    scalar = regression_metrics(loc, 1.5, y)
    full = regression_metrics(loc, np.full((2, 2), 1.5), y)
    assert scalar == pytest.approx(full)


def test_regression_rejects_bad_scale():
    with pytest.raises(ValueError, match="positive"):
        regression_metrics(np.zeros((1, 2)), 0.0, np.zeros(2))
    with pytest.raises(ValueError, match="broadcast"):
        regression_metrics(np.zeros((2, 3)), np.ones((3, 1)), np.zeros(3))
