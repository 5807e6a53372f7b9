"""Hidden-unit alignment: relabelling keeps the function, planted permutations are undone."""

from __future__ import annotations

import numpy as np
import pytest

from reports.alignment import (
    align_to_pivot,
    hidden_layers,
    kl_by_labelling,
    label_switches,
    permute_units,
    pivot_from_draws,
    relabel_randomly,
)
from reports.gaussian import fit_gaussian, kl_diag_full, kl_sampling_bias


def _net(rng: np.random.Generator, widths=(5, 4), d_in=2, d_out=1) -> dict[str, np.ndarray]:
    dims = [d_in, *widths, d_out]
    sites = {}
    for i in range(len(dims) - 1):
        sites[f"layer{i}.weight"] = rng.normal(size=(dims[i + 1], dims[i]))
        sites[f"layer{i}.bias"] = rng.normal(size=dims[i + 1])
    return sites


def _forward(sites: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Outputs of every draw: sites with leading sample axes ``(C, S)``, x ``(N, d_in)``."""
    layers = hidden_layers(sites)
    h = np.broadcast_to(x, (*sites["layer0.weight"].shape[:2], *x.shape))
    for i in [*layers, layers[-1] + 1]:
        h = np.einsum("csni,csoi->csno", h, sites[f"layer{i}.weight"])
        h = h + sites[f"layer{i}.bias"][:, :, None, :]
        if i in layers:
            h = np.maximum(h, 0.0)
    return h


def _draws(pivot, rng, chains=3, draws=50, noise=0.01):
    return {k: v + noise * rng.normal(size=(chains, draws, *v.shape)) for k, v in pivot.items()}


def test_relabelling_keeps_the_function():
    rng = np.random.default_rng(0)
    draws = _draws(_net(rng), rng, noise=0.5)
    x = rng.normal(size=(7, 2))
    relabelled = relabel_randomly(draws, rng)
    assert not np.array_equal(relabelled["layer0.weight"], draws["layer0.weight"])
    np.testing.assert_allclose(_forward(relabelled, x), _forward(draws, x), atol=1e-12)


@pytest.mark.parametrize("strength", [0.0, 0.5])
def test_alignment_undoes_planted_permutations_and_rescalings(strength):
    # the units' log strength (incoming norm x outgoing norm) is rescaling-invariant too
    rng = np.random.default_rng(1)
    pivot = _net(rng)
    truth = _draws(pivot, rng)
    # a positive rescaling of every unit (ReLU is positively homogeneous), then relabelling
    scaled = dict(truth)
    for layer in hidden_layers(truth):
        c = rng.uniform(0.2, 5.0, size=truth[f"layer{layer}.bias"].shape)
        scaled[f"layer{layer}.weight"] = scaled[f"layer{layer}.weight"] * c[..., None]
        scaled[f"layer{layer}.bias"] = scaled[f"layer{layer}.bias"] * c
        scaled[f"layer{layer + 1}.weight"] = scaled[f"layer{layer + 1}.weight"] / c[..., None, :]
    mixed = relabel_randomly(scaled, rng)
    out = align_to_pivot(mixed, pivot, strength=strength)
    for name in scaled:
        np.testing.assert_array_equal(out.sites[name], scaled[name])
    x = rng.normal(size=(5, 2))
    np.testing.assert_allclose(_forward(out.sites, x), _forward(truth, x), atol=1e-9)


def test_label_switches_counts_changes_within_each_chain():
    ident, swap = [0, 1, 2], [1, 0, 2]
    perms = np.array([[ident, ident, swap, swap, ident], [ident] * 5])
    np.testing.assert_array_equal(label_switches(perms), [2, 0])


def test_permute_units_takes_one_permutation_for_every_draw():
    rng = np.random.default_rng(2)
    draws = _draws(_net(rng), rng)
    out = permute_units(draws, 0, np.array([4, 3, 2, 1, 0]))
    np.testing.assert_array_equal(
        out["layer0.weight"][..., 0, :], draws["layer0.weight"][..., 4, :]
    )
    np.testing.assert_array_equal(out["layer1.weight"][..., 0], draws["layer1.weight"][..., 4])
    assert out["layer2.weight"] is draws["layer2.weight"]


def test_hidden_layers_refuses_gaps():
    with pytest.raises(ValueError, match="layer0.weight"):
        hidden_layers({"layer0.weight": np.zeros((2, 2)), "layer2.weight": np.zeros((1, 2))})


def test_aligned_kl_recovers_a_known_gaussian_behind_label_switching():
    """Correlated Gaussian draws around a pivot, each draw relabelled: aligned = unswitched.

    Well-separated units are matched exactly, so the aligned KL equals the KL of the draws
    before relabelling to the last bit, the null is exactly 0, and that KL less its Wishart
    sampling bias is within Monte Carlo error of the population KL.
    """
    rng = np.random.default_rng(3)
    pivot = _net(rng, widths=(4,), d_in=2, d_out=1)
    names = sorted(pivot)
    d = sum(v.size for v in pivot.values())
    a = rng.normal(size=(d, d)) / np.sqrt(d)
    cov = 1e-4 * (a @ a.T + 0.5 * np.eye(d))
    n_chain, n_draw = 4, 1000
    flat = rng.multivariate_normal(np.zeros(d), cov, size=(n_chain, n_draw))
    truth, start = {}, 0
    for k in names:
        size = pivot[k].size
        truth[k] = pivot[k] + flat[..., start : start + size].reshape(
            n_chain, n_draw, *pivot[k].shape
        )
        start += size
    mixed = relabel_randomly(truth, rng)
    res = kl_by_labelling(mixed, pivot, seed=4)
    kl_truth = float(kl_diag_full(fit_gaussian(flat.reshape(-1, d), jitter=1e-6).cov))
    assert res.aligned == pytest.approx(kl_truth, rel=1e-9)
    assert res.null == 0.0
    assert res.raw > 10 * res.aligned  # label switching dominates the raw KL
    n = n_chain * n_draw
    population = float(kl_diag_full(cov + 1e-6 * np.eye(d)))
    # the plug-in KL's sd at n = 4000 i.i.d. draws and d = 17 is about sqrt(d^2 / (2 n^2))
    # per pair term summed: well under 0.01 nats; 0.02 is over 3 sd
    assert res.aligned - kl_sampling_bias(n, d) == pytest.approx(population, abs=0.02)


def _near_identical_pair(pivot: dict) -> dict:
    """The one-hidden-layer network with its unit 1 made unit 0 times 1.001 (in- and
    outgoing weights): two units alignment cannot tell apart."""
    for name, axis in (("layer0.weight", 0), ("layer0.bias", 0), ("layer1.weight", 1)):
        arr = np.moveaxis(pivot[name], axis, 0).copy()
        arr[1] = arr[0] * 1.001
        pivot[name] = np.moveaxis(arr, 0, axis)
    return pivot


def test_alignment_null_measures_what_aligning_adds_for_near_identical_units():
    """Two units with the same signature are exchangeable: aligning their draws adds KL.

    The draws are not label-switched, so the aligned KL less the raw one is what the
    alignment alone adds; the null, made from independent draws of the same marginals,
    must predict it. Over 6 seeds (the single-seed values scatter by a factor of 2) the
    totals agree within 30%.
    """
    nulls, added = [], []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        pivot = _near_identical_pair(_net(rng, widths=(4,)))
        draws = _draws(pivot, rng, chains=4, draws=500, noise=0.05)
        res = kl_by_labelling(draws, pivot, seed=seed + 100)
        nulls.append(res.null)
        added.append(res.aligned - res.raw)
    assert min(nulls) > 0 and min(added) > 0
    assert sum(nulls) / sum(added) == pytest.approx(1.0, abs=0.3)


def test_the_nulls_own_error_is_its_spread_over_reruns():
    """``null_sd`` (from 3 more sets of null draws) estimates how far ``null`` moves on a
    rerun: over 40 seeds of one near-identical pair, the root mean square of ``null_sd``
    (120 degrees of freedom) and the sd of ``null`` across the seeds (39) agree within 35%
    (their ratio's sd is about 13%), and the first set's null is the one without
    replicates, to the bit."""
    rng = np.random.default_rng(11)
    pivot = _near_identical_pair(_net(rng, widths=(4,)))
    draws = _draws(pivot, rng, chains=4, draws=200, noise=0.05)
    runs = [kl_by_labelling(draws, pivot, seed=s, null_reps=3) for s in range(40)]
    assert kl_by_labelling(draws, pivot, seed=3).null == runs[3].null
    assert kl_by_labelling(draws, pivot, seed=3).null_sd is None
    spread = np.std([r.null for r in runs], ddof=1)
    rms = np.sqrt(np.mean([r.null_sd**2 for r in runs]))
    assert rms / spread == pytest.approx(1.0, abs=0.35)


def test_pivot_from_draws_finds_the_labelling_of_the_majority():
    """Draws of one network, each relabelled: the pivot is that network in one labelling."""
    rng = np.random.default_rng(7)
    net = _net(rng)
    truth = _draws(net, rng, chains=2, draws=40)
    pivot = pivot_from_draws(relabel_randomly(truth, rng))
    aligned = align_to_pivot(truth, pivot).sites
    # the pivot is the truth's mean up to one relabelling of each layer
    again = align_to_pivot({k: v[None, None] for k, v in pivot.items()}, net).sites
    for name in net:
        np.testing.assert_allclose(again[name][0, 0], truth[name].mean(axis=(0, 1)), atol=1e-12)
    assert all(
        len(np.unique(p.reshape(-1, p.shape[-1]), axis=0)) == 1
        for p in align_to_pivot(truth, pivot).perms.values()
    )
    assert aligned["layer0.weight"].shape == truth["layer0.weight"].shape
