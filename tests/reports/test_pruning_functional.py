"""The rule-free measure of over-pruning: variance shares and effective units (no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from reports.figures.pruning import variance_share_figure
from reports.pruning import (
    contribution_variance,
    effective_units,
    functional_metrics,
    variance_shares,
)


def _layer(rng, s: int = 3, n: int = 40, units: int = 5, out: int = 2):
    act = np.tanh(rng.normal(size=(s, n, units)))
    w = rng.normal(size=(s, out, units))
    return act, w


def test_one_unit_carries_everything() -> None:
    act, w = _layer(np.random.default_rng(0))
    w[:, :, 1:] = 0.0  # units 1.. have zero outgoing weights
    within, between = contribution_variance(act, w)
    share = variance_shares(within + between)
    np.testing.assert_allclose(share, [1, 0, 0, 0, 0], atol=0)
    assert effective_units(share) == 1.0
    m = functional_metrics([share], [np.array([False, True, True, True, True])])
    assert m["units_eff.layer0"] == 1.0 and m["units_eff_frac.layer0"] == pytest.approx(0.2)
    assert m["pruned_var_share.layer0"] == 0.0 and m["units_eff_frac"] == pytest.approx(0.2)


def test_equal_units_give_n() -> None:
    rng = np.random.default_rng(1)
    one = np.tanh(rng.normal(size=(4, 30, 1)))
    act = np.repeat(one, 6, axis=2)  # six units computing the same function
    w = np.repeat(rng.normal(size=(4, 3, 1)), 6, axis=2)  # with the same outgoing weights
    share = variance_shares(sum(contribution_variance(act, w)))
    np.testing.assert_allclose(share, np.full(6, 1 / 6))
    assert effective_units(share) == pytest.approx(6.0)
    assert effective_units(np.full(50, 0.02)) == pytest.approx(50.0)


def test_within_plus_between_is_the_variance_over_draws_and_inputs() -> None:
    act, w = _layer(np.random.default_rng(2), s=7, n=25, units=4, out=3)
    within, between = contribution_variance(act, w)
    c = act[:, :, :, None] * np.swapaxes(w, 1, 2)[:, None]  # (S, N, units, out)
    brute = c.reshape(-1, 4, 3).var(0).sum(-1)
    np.testing.assert_allclose(within + between, brute, rtol=1e-12)
    # one draw (a point estimate): nothing between draws
    w1, b1 = contribution_variance(act[:1], w[:1])
    np.testing.assert_array_equal(b1, 0.0)
    np.testing.assert_allclose(w1, c[0].var(0).sum(-1), rtol=1e-12)


def test_participation_ratio_ignores_a_tail_of_tiny_shares() -> None:
    s = np.r_[np.full(5, 0.19), np.full(45, 0.05 / 45)]
    assert effective_units(s) == pytest.approx(5.54, abs=0.01)
    assert np.exp(-(s * np.log(s)).sum()) == pytest.approx(6.81, abs=0.01)  # the entropy's


def test_no_output_variance_is_nan_not_an_error() -> None:
    act = np.ones((2, 10, 3))  # constant activations ...
    w = np.zeros((2, 1, 3))  # ... and no outgoing weight
    share = variance_shares(sum(contribution_variance(act, w)))
    assert np.isnan(share).all() and np.isnan(effective_units(share))
    m = functional_metrics([share])
    assert np.isnan(m["units_eff.layer0"]) and "pruned_var_share.layer0" not in m


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        contribution_variance(np.zeros((2, 5, 3)), np.zeros((2, 1, 4)))


def test_share_figure_marks_pruned_units() -> None:
    per = {
        "MF": {
            "layer0.var_share": np.array([0.7, 0.3, 0.0]),
            "layer0.pruned": np.array([False, False, True]),
        },
        "MAP": {"layer0.var_share": np.array([0.5, 0.5, 0.0])},
    }
    fig = variance_share_figure(per, 0, title="t")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["MF: 1.7 effective of 3", "MAP: 2.0 effective of 3"]
