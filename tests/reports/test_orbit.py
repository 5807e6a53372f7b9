"""Orbit coordinates: the invariants ignore every rescaling, the balance sees a stuck chain."""

from __future__ import annotations

import numpy as np
import pytest

from reports.alignment import hidden_layers
from reports.orbit import max_split_rhat, min_bulk_ess, orbit_coordinates, orbit_rhat
from tests.reports.test_alignment import _forward, _net


def _iid(rng, chains, draws, widths=(5, 4)) -> dict[str, np.ndarray]:
    """Independent standard normal draws of every weight and bias: R-hat near 1 throughout."""
    shape = _net(rng, widths)
    return {k: rng.normal(size=(chains, draws, *v.shape)) for k, v in shape.items()}


def _rescale(sites, layer: int, c: np.ndarray) -> dict[str, np.ndarray]:
    """Unit j of ``layer``: incoming times ``c[..., j]``, outgoing over it (same function)."""
    out = dict(sites)
    out[f"layer{layer}.weight"] = sites[f"layer{layer}.weight"] * c[..., :, None]
    out[f"layer{layer}.bias"] = sites[f"layer{layer}.bias"] * c
    out[f"layer{layer + 1}.weight"] = sites[f"layer{layer + 1}.weight"] / c[..., None, :]
    return out


def _rescale_all(sites, rng, shape) -> dict[str, np.ndarray]:
    """Every hidden unit rescaled by its own log-uniform c, one per index of ``shape``."""
    out = sites
    for layer in hidden_layers(sites):
        h = sites[f"layer{layer}.weight"].shape[-2]
        out = _rescale(out, layer, np.exp(rng.uniform(-1.5, 1.5, size=(*shape, h))))
    return out


def test_invariants_ignore_every_rescaling_and_the_balance_moves():
    rng = np.random.default_rng(0)
    draws = _iid(rng, 3, 20, widths=(5, 4, 3))
    moved = _rescale_all(draws, rng, (3, 20))
    x = rng.normal(size=(6, 2))
    np.testing.assert_allclose(_forward(moved, x), _forward(draws, x), atol=1e-10)
    a, b = orbit_coordinates(draws), orbit_coordinates(moved)
    assert a.balance.shape == a.invariant.shape == (3, 20, 12)
    assert a.units[0] == "layer0[0]" and a.units[-1] == "layer2[2]"
    np.testing.assert_allclose(b.invariant, a.invariant, atol=1e-10)
    assert np.abs(b.balance - a.balance).max() > 0.5


def test_one_hidden_layer_invariant_is_the_product_of_norms():
    rng = np.random.default_rng(1)
    draws = _iid(rng, 2, 5, widths=(4,))
    w_in = np.concatenate([draws["layer0.weight"], draws["layer0.bias"][..., None]], -1)
    n_in = np.linalg.norm(w_in, axis=-1)
    n_out = np.linalg.norm(draws["layer1.weight"], axis=-2)
    c = orbit_coordinates(draws)
    np.testing.assert_allclose(c.invariant, np.log(n_in * n_out), rtol=1e-12)
    np.testing.assert_allclose(c.balance, np.log(n_in / n_out), rtol=1e-12)


def test_chains_differing_by_rescaling_pass_on_invariants_fail_on_balance():
    # 4 chains of 1000 independent draws each: split R-hat's Monte Carlo spread is about
    # 1 / sqrt(8 * 1000) per unit, so the largest of 9 units stays below 1.01
    rng = np.random.default_rng(2)
    draws = _iid(rng, 4, 1000)
    moved = _rescale_all(draws, rng, (4, 1))  # one rescaling per chain, held for its draws
    r = orbit_rhat(moved)
    assert r.invariant < 1.01
    assert r.balance > 1.5
    assert r.split == r.balance
    assert r.balance_nested is None and r.nested is None  # no superchains


def test_one_chain_stuck_at_another_balance_shows_in_the_balance_rhat():
    rng = np.random.default_rng(3)
    draws = _iid(rng, 4, 1000)
    c = np.ones((4, 1, 5))
    c[0, 0, 2] = 3.0  # chain 0's unit 2 of layer 0 sits elsewhere on its orbit
    r = orbit_rhat(_rescale(draws, 0, c))
    assert r.balance > 1.1
    assert r.invariant < 1.01
    assert orbit_rhat(draws).balance < 1.01


def test_superchains_at_different_balances_fail_nested():
    rng = np.random.default_rng(4)
    draws = _iid(rng, 8, 500)
    c = np.ones((8, 1, 5))
    c[:4] = 2.5  # superchain 0: every unit of layer 0 rescaled
    ids = [0, 0, 0, 0, 1, 1, 1, 1]
    r = orbit_rhat(_rescale(draws, 0, c), ids)
    assert r.balance_nested > 1.1
    assert r.invariant_nested < 1.02
    assert r.nested == r.balance_nested


@pytest.mark.parametrize("chains", [1, 3])
def test_max_split_rhat_none_with_one_chain_nan_when_stuck(chains):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(chains, 100, 3))
    if chains == 1:
        assert max_split_rhat(x) is None
        return
    assert max_split_rhat(x) < 1.05
    x[:, :, 1] = 0.0  # a quantity that never moved
    assert np.isnan(max_split_rhat(x))


def test_min_bulk_ess_of_independent_draws_and_of_a_stuck_column():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 250, 3))
    # independent draws: ESS about chains x draws = 1000 (the minimum of 3 a little below)
    assert 700 < min_bulk_ess(x) < 1300
    x[:, :, 2] = 1.0
    assert np.isnan(min_bulk_ess(x))
