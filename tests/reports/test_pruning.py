"""The pruning rule and per-unit statistics on constructed posteriors (no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from reports.pruning import (
    PAPER_TABLE1,
    PruningRule,
    gaussian_kl,
    pruned_fraction,
    pruned_units,
    unit_stats,
)


def _two_units(fan_in: int = 13):
    """Unit 0 pruned (incoming at the prior, outgoing ~0), unit 1 active."""
    w_mean = np.stack([np.zeros(fan_in), np.linspace(-2, 2, fan_in)])
    w_std = np.stack([np.full(fan_in, 0.98), np.full(fan_in, 0.05)])
    b = (np.array([0.0, 0.5]), np.array([0.99, 0.05]))
    out = (np.array([[0.01, 1.3]]), np.array([[0.02, 0.05]]))
    return (w_mean, w_std), b, out


def test_one_pruned_one_active() -> None:
    w, b, out = _two_units()
    st = unit_stats(w, b, out, prior_in=(0.0, 1.0))
    assert st.out_snr == pytest.approx([0.5, 26.0])
    assert st.in_kl[0] < 1e-3 < 1.0 < st.in_kl[1]
    assert st.in_std_ratio[0] == pytest.approx((13 * 0.98 + 0.99) / 14)
    np.testing.assert_array_equal(pruned_units(st), [True, False])
    fr = pruned_fraction([st])
    assert fr["pruned_frac"] == 0.5 and fr["n_pruned"] == 1 and fr["in_at_prior_frac"] == 0.5


def test_each_half_of_the_rule_is_needed() -> None:
    w, b, out = _two_units()
    # outgoing weight of unit 0 confidently away from zero: not pruned
    st = unit_stats(w, b, (np.array([[0.3, 1.3]]), out[1]), prior_in=(0.0, 1.0))
    np.testing.assert_array_equal(pruned_units(st), [False, False])
    # incoming weights of unit 0 shrunk to std 0.5 (KL 0.32 nats): not at the prior
    w2 = (w[0], np.stack([np.full(13, 0.5), w[1][1]]))
    st = unit_stats(w2, (b[0], np.array([0.5, 0.05])), out, prior_in=(0.0, 1.0))
    np.testing.assert_array_equal(pruned_units(st), [False, False])
    # thresholds come from the rule: a looser one prunes it again
    loose = PruningRule(out_snr_max=2.0, in_kl_max=0.5, in_std_ratio_min=0.4)
    np.testing.assert_array_equal(pruned_units(st, loose), [True, False])


def test_point_estimates_and_fixed_small_variance_are_never_pruned() -> None:
    w, b, out = _two_units()
    zero = (np.zeros_like(w[0]), np.zeros_like(w[1]))
    st = unit_stats(
        (w[0], zero[1]), (b[0], np.zeros(2)), (out[0], np.zeros((1, 2))), prior_in=(0.0, 1.0)
    )
    assert np.isinf(st.in_kl).all() and np.isinf(st.out_snr[1])
    assert not pruned_units(st).any()
    gd = unit_stats(
        (w[0], np.full_like(w[1], 0.05)),
        (b[0], np.full(2, 0.05)),
        (out[0], np.full((1, 2), 0.05)),
        prior_in=(0.0, 1.0),
    )
    assert not pruned_units(gd).any()  # GD: std fixed far below the prior std


def test_gaussian_kl_closed_form() -> None:
    assert gaussian_kl(0.0, 1.0, 0.0, 1.0) == pytest.approx(0.0)
    # KL(N(1, 0.5^2) || N(0, 2^2)) = log(2/0.5) + (0.25 + 1) / 8 - 0.5
    assert gaussian_kl(1.0, 0.5, 0.0, 2.0) == pytest.approx(np.log(4) + 1.25 / 8 - 0.5)
    rng = np.random.default_rng(0)
    z = 1.0 + 0.5 * rng.standard_normal(400_000)  # Monte Carlo check
    logq = -0.5 * ((z - 1) / 0.5) ** 2 - np.log(0.5)
    logp = -0.5 * (z / 2) ** 2 - np.log(2.0)
    assert gaussian_kl(1.0, 0.5, 0.0, 2.0) == pytest.approx((logq - logp).mean(), abs=5e-3)


def test_per_layer_fractions_for_deeper_networks() -> None:
    w, b, out = _two_units()
    l0 = unit_stats(
        w, b, (np.array([[0.01, 1.3], [0.0, 2.0]]), np.full((2, 2), 0.05)), prior_in=(0.0, 1.0)
    )
    l1 = unit_stats(w, b, out, prior_in=(0.0, 1.0))
    l1 = l1._replace(in_kl=np.array([1.0, 1.0]))  # layer 1: nothing at the prior
    fr = pruned_fraction([l0, l1])
    assert fr["pruned_frac.layer0"] == 0.5 and fr["pruned_frac.layer1"] == 0.0
    assert fr["pruned_frac"] == 0.25


def test_bad_shapes_are_named() -> None:
    w, b, out = _two_units()
    with pytest.raises(ValueError, match="shapes"):
        unit_stats(w, b, (np.zeros((1, 3)), np.ones((1, 3))), prior_in=(0.0, 1.0))


def test_paper_table_is_quoted_for_both_sets() -> None:
    for name in ("boston", "concrete"):
        assert set(PAPER_TABLE1[name]) == {"HMC", "SGLD", "ES", "FC", "MAP", "MF", "GD"}
    assert PAPER_TABLE1["boston"]["MF"] == (-2.62, 0.06)
    assert PAPER_TABLE1["concrete"]["MAP"] == (-4.29, 0.20)
