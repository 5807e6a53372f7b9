"""The price of mean field's ``stop_at_grade``: draw on until the aligned weights pass.

Planted draws of a one-hidden-layer MLP with four distinct units: chains that differ only
by a relabelling of the units (label switching) pass the silver gates once aligned; chains
one of which sits away from the others fail them; the rule aligns only new draws.
"""

from __future__ import annotations

import numpy as np
import pytest

from reports.grade import gates_pass
from zoo.spec.sections.studies.price_of_mf import PriceOfMeanFieldStudy
from zoo.studies.price_of_mf.stopping import GateRule

H = 4
#: Each unit's incoming direction, far apart, so the alignment can tell them apart.
DIRS = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, 0.0], [0.0, -3.0]])


def _draws(
    chains: int, k: int, seed: int, *, shift: float = 0.0, switch: bool = False, tie: bool = False
):
    """iid draws around the planted units; ``switch`` relabels each chain's units at random,
    ``shift`` moves chain 0's first unit by that much, ``tie`` makes the output bias equal
    the first output weight's deviation in half the chains (the same marginals, another
    correlation: a KL that differs between chains)."""
    rng = np.random.default_rng(seed)
    w0 = DIRS[None, None] + 0.3 * rng.standard_normal((chains, k, H, 2))
    b0 = 0.3 * rng.standard_normal((chains, k, H))
    w1 = 1.0 + 0.1 * np.arange(H) + 0.3 * rng.standard_normal((chains, k, 1, H))
    b1 = 0.3 * rng.standard_normal((chains, k, 1))
    w0[0, :, 0, 0] += shift
    if tie:
        b1[: chains // 2, :, 0] = w1[: chains // 2, :, 0, 0] - 1.0
    if switch:
        for c in range(chains):
            p = rng.permutation(H)
            w0[c], b0[c], w1[c] = w0[c][:, p], b0[c][:, p], w1[c][..., p]
    return {"layer0.weight": w0, "layer0.bias": b0, "layer1.weight": w1, "layer1.bias": b1}


def test_label_switched_chains_pass_once_aligned():
    rule = GateRule("silver", homogeneous=True)
    assert rule(_draws(8, 200, 0, switch=True)) is True
    assert rule.last["weights_rhat_aligned"] < 1.05
    assert rule.last["weights_ess_bulk_aligned"] >= 100
    assert rule.last["kl_rhat"] < 1.05


def test_chains_that_agree_on_the_marginals_but_not_the_kl_fail():
    rule = GateRule("silver", homogeneous=True)
    assert rule(_draws(8, 200, 4, tie=True)) is False
    assert rule.last["weights_rhat_aligned"] < 1.05
    assert rule.last["kl_rhat"] > 1.05


def test_a_chain_away_from_the_others_fails():
    rule = GateRule("silver", homogeneous=False)
    assert rule(_draws(8, 200, 1, shift=1.5)) is False
    assert rule.last["weights_rhat_aligned"] > 1.05
    assert "orbit_rhat" not in rule.last


def test_too_few_draws_fail_the_ess_gate():
    rule = GateRule("silver", homogeneous=False)
    assert rule(_draws(4, 10, 2)) is False  # 40 draws: bulk ESS < 100
    assert rule.last["weights_ess_bulk_aligned"] < 100


def test_only_new_draws_are_aligned_and_the_pivot_stays():
    full = _draws(4, 120, 3, switch=True)
    rule = GateRule("gold", homogeneous=True)
    rule({n: v[:, :60] for n, v in full.items()})
    pivot = rule._pivot
    rule(full)
    assert rule._pivot is pivot and rule._seen == 120
    fresh = GateRule("gold", homogeneous=True)
    fresh._pivot = pivot
    fresh(full)
    for n in full:
        np.testing.assert_array_equal(
            np.concatenate(rule._aligned[n], 1), np.concatenate(fresh._aligned[n], 1)
        )


def test_gates_pass_reads_the_named_gates_only():
    m = {"weights_rhat_aligned": 1.04, "weights_ess_bulk_aligned": 150.0, "divergent_frac": 0.5}
    assert gates_pass("silver", m, ["r_hat", "ess_bulk"])
    assert not gates_pass("gold", m, ["r_hat", "ess_bulk"])
    assert not gates_pass("silver", m, ["divergences"])
    assert not gates_pass("silver", {}, ["r_hat"])  # none applies
    with pytest.raises(ValueError, match="no gate named"):
        gates_pass("silver", m, ["rhat"])


def test_stop_at_grade_needs_kl_target_draws():
    with pytest.raises(ValueError, match="stop_at_grade applies only with kl_target_draws"):
        PriceOfMeanFieldStudy(kind="price_of_mean_field", stop_at_grade="silver")
    s = PriceOfMeanFieldStudy(
        kind="price_of_mean_field",
        kl_target_draws=500,
        stop_at_grade="silver",
        gaussian_fit={"cov": "empirical"},
    )
    assert s.stop_at_grade == "silver"
