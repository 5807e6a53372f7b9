"""The predictive comparisons against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from reports.predictive import (
    compare_predictives,
    predictive_agreement,
    predictive_entropy,
    predictive_kl,
    predictive_tv,
)


def test_identical_predictives_are_at_distance_zero():
    p = np.array([[0.2, 0.8], [0.6, 0.4], [1 / 3, 2 / 3]])
    assert compare_predictives(p, p) == {"tv": 0.0, "agree": 1.0, "kl": 0.0}


def test_disjoint_predictives_are_at_tv_one_and_disagree():
    p = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    q = np.array([[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]])
    assert predictive_tv(p, q) == 1.0
    assert predictive_agreement(p, q) == 0.0
    # p puts mass where q has none: the KL is at the floor's cost, finite and huge
    assert np.isfinite(predictive_kl(p, q)) and predictive_kl(p, q) > 600


def test_tv_and_agreement_by_hand():
    p = np.array([[0.9, 0.1], [0.3, 0.7], [0.5, 0.5], [0.2, 0.8]])
    q = np.array([[0.6, 0.4], [0.6, 0.4], [0.5, 0.5], [0.1, 0.9]])
    # 0.5 * sum |p - q| per point: 0.3, 0.3, 0, 0.1
    assert predictive_tv(p, q) == pytest.approx((0.3 + 0.3 + 0.0 + 0.1) / 4)
    # argmax: 0/0, 1/0, 0/0 (tie -> lowest index), 1/1
    assert predictive_agreement(p, q) == pytest.approx(3 / 4)


def test_kl_of_two_bernoullis_is_the_closed_form():
    a, b = np.array([0.3, 0.9]), np.array([0.5, 0.6])
    p, q = np.stack([1 - a, a], 1), np.stack([1 - b, b], 1)
    closed = a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))
    assert predictive_kl(p, q) == pytest.approx(closed.mean(), rel=1e-12)
    assert predictive_kl(q, p) != pytest.approx(predictive_kl(p, q))  # KL(p_ref || p): ordered


def test_entropy_by_hand():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.25, 0.75]])
    h = [np.log(2), 0.0, -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))]
    assert predictive_entropy(p) == pytest.approx(np.mean(h), rel=1e-12)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="same shape"):
        predictive_kl(np.ones((2, 2)) / 2, np.ones((3, 2)) / 2)
