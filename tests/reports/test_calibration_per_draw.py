"""Per-draw metrics against those of the predictive mixture; the Brier conventions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax

from reports.calibration import brier, classification_metrics, per_draw_metrics


def _toy(seed: int = 0, s: int = 30, n: int = 50, c: int = 4):
    rng = np.random.default_rng(seed)
    logp = log_softmax(rng.normal(scale=2.0, size=(s, n, c)), axis=-1)
    return logp, rng.integers(0, c, size=n)


def test_per_draw_nll_is_at_least_the_mixture_nll_jensen() -> None:
    for seed in range(5):
        logp, y = _toy(seed)
        pd_ = per_draw_metrics(logp, y)
        mix = classification_metrics(logp, y)
        assert pd_["nll_per_draw"] >= mix["nll"]
        assert pd_["nll_per_draw"] > mix["nll"] + 0.05  # draws that disagree: a real gap


def test_per_draw_metrics_by_hand() -> None:
    logp = np.log(np.array([[[0.9, 0.1], [0.2, 0.8]], [[0.5, 0.5], [0.6, 0.4]]]))
    y = np.array([0, 1])
    res = per_draw_metrics(logp, y)
    nll_s = np.array([-(np.log(0.9) + np.log(0.8)) / 2, -(np.log(0.5) + np.log(0.4)) / 2])
    assert res["nll_per_draw"] == pytest.approx(nll_s.mean())
    assert res["nll_per_draw_sem"] == pytest.approx(nll_s.std(ddof=1) / np.sqrt(2))
    # draw 0 gets both right; draw 1 ties on point 0 (argmax: class 0, right) and is wrong
    # on point 1
    assert res["accuracy_per_draw"] == pytest.approx(0.75)
    # identical draws: per draw equals the mixture, and the s.e. is 0
    same = np.repeat(logp[:1], 3, axis=0)
    r = per_draw_metrics(same, y)
    assert r["nll_per_draw"] == pytest.approx(classification_metrics(same, y)["nll"])
    assert r["nll_per_draw_sem"] == 0.0
    assert np.isnan(per_draw_metrics(logp[:1], y)["nll_per_draw_sem"])
    with pytest.raises(ValueError, match="shape"):
        per_draw_metrics(logp[0], y)


def test_tfp_brier_is_ours_minus_one() -> None:
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    y = np.array([0, 2])
    tfp = np.mean(np.sum(p**2, axis=1) - 2 * p[np.arange(2), y])  # tfp.stats.brier_score
    assert brier(p, y) - 1 == pytest.approx(tfp)
