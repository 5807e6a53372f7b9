"""The price-of-mean-field study: output-column KL, the stopping rule, a sampled cell."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

import zoo.studies.price_of_mf.probe as pmf
from reports.draws import flatten_sites
from reports.gaussian import fit_gaussian, kl_sampling_bias
from reports.kl_reference import mean_ess, pooled_n, squares_ess_from_moments
from tests import specs
from zoo.execution.cell import run_cell
from zoo.inference.base import Fit
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.streaming import StreamingMoments
from zoo.inference.sampling import SampledPosterior
from zoo.runtime import Runtime
from zoo.spec.sections.studies import GaussianFitSpec

SPEC = specs.spec(
    "pmf",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=50, noise=0.1),
    model=specs.mlp(depth=1, width=3),
    inference=[
        specs.svi("mfvi", steps=20, predictive_samples=5),
        specs.nuts(
            init_from="mfvi",
            warmup=20,
            draws=10,
            chains=2,
            vectorize_chains=True,
            max_tree_depth=4,
            predictive_draws=10,
        ),
    ],
    studies=[
        specs.study(
            "price_of_mean_field",
            gaussian_fit={"cov": "empirical"},
            kl_target_draws=100000,
            max_draws=35,
        )
    ],
)
#: Regression with a learned noise instead of two moons (replaces SPEC's data).
BOSTON = {"data": specs.uci("boston"), "likelihood": specs.section("gaussian", noise="learned")}


def test_kl_output_columns_sums_the_closed_form_pair_kls():
    # Two classes: each output column (w[0, j], w[1, j]) and the bias pair is a correlated
    # pair; a 2x2 block's KL(q_diag || q_full) is -log(1 - r^2) / 2 with r the correlation of
    # the fitted covariance. Hidden-layer weights are independent and do not enter.
    rng = np.random.default_rng(0)
    s, rhos = 4000, [-0.8, -0.4, 0.0, 0.6]
    pairs = [rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=s) for r in rhos]
    w_out = np.stack(pairs[:3], axis=2)  # (S, 2, 3): column j is pair j
    sites = {
        "layer0.weight": rng.normal(size=(1, s, 3, 2)),
        "layer0.bias": rng.normal(size=(1, s, 3)),
        "layer1.weight": w_out[None],
        "layer1.bias": pairs[3][None],
    }
    flat = flatten_sites(sites)
    fit = GaussianFitSpec(cov="empirical", jitter=0.0)
    cov = fit_gaussian(flat.draws, cov="empirical", jitter=0.0).cov

    def pair_kl(i, j):
        r = cov[i, j] / np.sqrt(cov[i, i] * cov[j, j])
        return -0.5 * np.log1p(-(r**2))

    first = flat.labels.index("layer1.weight[0,0]")
    expected = sum(pair_kl(first + j, first + 3 + j) for j in range(3)) + pair_kl(
        first + 6, first + 7
    )
    assert pmf.kl_output_columns(flat, fit) == pytest.approx(expected, rel=1e-10)
    # ... which is close to the population value within Monte Carlo error (r's s.e. ~ 0.01)
    assert pmf.kl_output_columns(flat, fit) == pytest.approx(
        sum(-0.5 * np.log1p(-(r**2)) for r in rhos), abs=0.05
    )


def test_stopping_rule_sees_the_weight_columns_of_the_flat_draws(
    tmp_path, monkeypatch, cell_context
):
    # a learned noise sits after the weights in the flat vector; the rule must leave it out
    cell = specs.load(tmp_path, {**SPEC, **BOSTON}).cells()[1]
    ctx = cell_context(cell)
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    flat = np.random.default_rng(0).normal(size=(2, 30, pot.dim)).astype(np.float32)
    cols = np.concatenate(
        [
            np.arange(sl.start, sl.stop)
            for name, sl in pot.site_slices.items()
            if name.startswith("layer")
        ]
    )
    seen = {}

    def spy(draws, **kw):
        seen.update(draws=draws, **kw)
        return 7

    monkeypatch.setattr(pmf, "shift_null_iid_draws", spy)
    rule = pmf.kl_draws_rule(ctx.model, cell.studies[0], seed=5)
    with torch.no_grad():
        sites = {k: v.numpy() for k, v in pot.unravel(torch.from_numpy(flat)).items()}
    assert rule(sites) is False  # 7 < 100000
    np.testing.assert_array_equal(seen["draws"], flat[..., cols])
    assert seen["reps"] == 4 and seen["seed"] == 9


def test_sampled_cell_records_the_price_of_mean_field(tmp_path):
    cell = specs.load(tmp_path, SPEC).cells()[1]
    out = run_cell(cell, Runtime.cpu())
    m = out.metrics
    for k in (
        "kl_diag_full",
        "kl_null",
        "kl_excess",
        "kl_null_draws",
        "kl_output_columns",
        "kl_debiased",
        "kl_debiased_se",
        "w2_diag_full",
        "agreement_vi",
        "tv_vi",
        "max_r_hat",
        "min_ess_bulk",
        "kl_aligned",
        "kl_relabelled",
        "kl_alignment_null",
        "kl_aligned_debiased",
        "weights_rhat_raw",
        "weights_rhat_aligned",
        "label_switches",
        "orbit_rhat",
    ):
        assert k in m, k
    # the target is out of reach: the chains drew up to the cap, in rounds of 25 past draws
    assert m["draws_per_chain"] == 35
    assert set(out.artifacts) == {".nc"}


def test_unit_alignment_sees_through_chains_in_other_labellings(tmp_path, cell_context):
    """Half the chains in another labelling of the same posterior: the raw weights' R-hat
    fails, the aligned one passes, and the aligned KL is the KL of the draws before the
    chains were relabelled (exactly: the units are far apart, so the match is exact)."""
    from reports.alignment import permute_units

    ctx = cell_context(_cell(tmp_path))
    rng = np.random.default_rng(21)
    net = {k: rng.normal(size=shape) for k, (shape, _) in ctx.model.site_info().items()}
    draws = {k: v + 0.05 * rng.normal(size=(4, 200, *v.shape)) for k, v in net.items()}
    swapped = {k: v.copy() for k, v in draws.items()}
    half = permute_units({k: v[2:] for k, v in draws.items()}, 0, np.array([2, 0, 1]))
    for k in swapped:
        swapped[k][2:] = half[k]
    out = pmf.unit_alignment(ctx.model, swapped, None, seed=0, jitter=1e-6)
    ref = pmf.unit_alignment(ctx.model, draws, None, seed=0, jitter=1e-6)
    assert out["weights_rhat_raw"] > 1.5 and out["weights_rhat_aligned"] < 1.02
    assert out["kl_aligned"] == pytest.approx(ref["kl_aligned"], rel=1e-12)
    assert out["kl_relabelled"] > 10 * out["kl_aligned"]
    assert out["label_switches"] == 0.0  # no chain changes labelling within itself
    assert out["weights_rhat_nested_aligned"] is None  # no superchains
    assert out["orbit_rhat"] < 1.02 and out["orbit_rhat_nested"] is None  # relu: recorded


def test_unit_alignment_orbit_rhat_sees_chains_elsewhere_on_the_rescaling_orbit(
    tmp_path, cell_context
):
    """Half the chains with one ReLU unit rescaled (the same function): the log balance's
    R-hat fails, the invariants' passes; superchains along the split fail it nested."""
    ctx = cell_context(_cell(tmp_path))
    rng = np.random.default_rng(22)
    net = {k: rng.normal(size=shape) for k, (shape, _) in ctx.model.site_info().items()}
    draws = {k: v + 0.05 * rng.normal(size=(4, 200, *v.shape)) for k, v in net.items()}
    draws["layer0.weight"][2:, :, 1] *= 3.0
    draws["layer0.bias"][2:, :, 1] *= 3.0
    draws["layer1.weight"][2:, :, :, 1] /= 3.0
    out = pmf.unit_alignment(ctx.model, draws, [0, 0, 1, 1], seed=0, jitter=1e-6)
    assert out["orbit_rhat_balance"] > 1.5 and out["orbit_rhat_invariant"] < 1.02
    assert out["orbit_rhat"] == out["orbit_rhat_balance"]
    assert out["orbit_rhat_nested"] > 1.5


def test_unit_alignment_records_no_orbit_for_tanh(tmp_path, cell_context):
    tanh = {"model": specs.mlp(depth=1, width=3, activation="tanh")}
    ctx = cell_context(_cell(tmp_path, tanh))
    rng = np.random.default_rng(23)
    net = {k: rng.normal(size=shape) for k, (shape, _) in ctx.model.site_info().items()}
    draws = {k: v + 0.05 * rng.normal(size=(2, 50, *v.shape)) for k, v in net.items()}
    out = pmf.unit_alignment(ctx.model, draws, None, seed=0, jitter=1e-6)
    assert "weights_rhat_aligned" in out and "orbit_rhat" not in out


# --------------------------------------------------------------------------- streamed moments


@dataclass(frozen=True)
class _Streamed(SampledPosterior):
    """A sampled posterior that also carries streamed moments (as the ChEES fit's will)."""

    moments: Any = None
    site_slices: Any = None


def _cell(tmp_path, data: dict | None = None, cov: str = "empirical"):
    """The NUTS cell of SPEC, with other data (e.g. BOSTON) or another Gaussian fit."""
    spec = {**SPEC, **(data or {})}
    if cov != "empirical":  # the stopping rule is for the sample covariance only
        spec["studies"] = [specs.study("price_of_mean_field", gaussian_fit={"cov": cov})]
    return specs.load(tmp_path, spec).cells()[1]


def _gaussian_flat(pot: FlatPotential, chains: int, draws: int, seed: int) -> np.ndarray:
    """(C, S, D) draws of a correlated Gaussian over the whole flat vector (noise included)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(pot.dim, pot.dim)) / np.sqrt(pot.dim) + np.eye(pot.dim)
    return rng.normal(size=(chains, draws, pot.dim)) @ a.T * 0.3 + rng.normal(size=pot.dim)


def _posteriors(ctx, flat: np.ndarray, groups: int = 3):
    """The draws-only posterior and the streamed one of the same flat draws."""
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    sm = StreamingMoments(pot.dim, flat.shape[0], groups=groups)
    for t in range(flat.shape[1]):
        sm.update(torch.from_numpy(flat[:, t]))
    with torch.no_grad():
        sites = {k: v.numpy() for k, v in pot.unravel(torch.from_numpy(flat)).items()}
    return SampledPosterior(sites), _Streamed(
        sites, moments=sm.summary(), site_slices=dict(pot.site_slices)
    )


NEW = ("kl_source", "kl_ess_n", "kl_bias_ess", "kl_debiased", "kl_debiased_se", "ess_mean_n")


@pytest.mark.parametrize("data", [None, BOSTON], ids=["softmax", "learned_noise"])
def test_moments_path_equals_draws_path_on_the_same_draws(tmp_path, cell_context, data):
    # When the moments are those of the very draws the draws path sees, every KL and W2
    # agrees to rounding; the learned noise (log sigma, last in the flat vector) must be
    # left out of the moments as it is of the draws.
    cell = _cell(tmp_path, data)
    ctx = cell_context(cell)
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    assert ("noise" in pot.site_slices) == (data is not None)
    flat = _gaussian_flat(pot, chains=8, draws=60, seed=11)
    draws_post, streamed = _posteriors(ctx, flat, groups=8)  # the draws path's 8 groups
    probe = pmf.PriceOfMeanFieldProbe(cell.studies[0], ctx)
    a, _ = probe.finish(Fit(draws_post, 0.0))
    b, _ = probe.finish(Fit(streamed, 0.0))
    assert (a["kl_source"], b["kl_source"]) == ("draws", "moments")
    shared = [k for k in a if k.startswith(("kl_diag_full", "w2_diag")) or k == "kl_output_columns"]
    assert len([k for k in shared if k.startswith("kl_diag_full.layer")]) == 2
    assert ("kl_output_columns" in shared) == (data is None)
    for k in shared:
        assert b[k] == pytest.approx(a[k], rel=1e-9), k
    # here the kept draws are all the draws: the kept-draw numbers are the draws path's
    for k in ("w_diag", "w_full", "w_error", "w_excess", "w_draws"):
        assert b[k + "_kept"] == pytest.approx(a[k], rel=1e-9), k
    assert b["kl_kept"] == pytest.approx(a["kl_diag_full"], rel=1e-9)
    assert b["kl_excess_kept"] == pytest.approx(a["kl_excess"], rel=1e-9)
    assert b["kl_null"] == a["kl_null"] and "kl_excess" not in b
    assert b["n_draws"] == a["n_draws"] == 480 and b["dim"] == a["dim"] == ctx.model.num_params
    # the new metrics on both paths, numbers (480 draws > D), never NaN
    for out in (a, b):
        for k in NEW:
            assert out[k] is not None, k
        assert out["kl_debiased"] == pytest.approx(out["kl_diag_full"] - out["kl_bias_ess"])
        assert out["kl_bias_ess"] == pytest.approx(kl_sampling_bias(out["kl_ess_n"], out["dim"]))
        assert "kl_excess_ess" not in out and out["kl_debiased_se"] > 0
        layers = [k for k in out if k.startswith("kl_debiased.layer")]
        assert len(layers) == 2 and all(out[k] is not None for k in layers)
        assert all(np.isfinite(v) for v in out.values() if isinstance(v, float))
    m = streamed.moments.restrict(pmf.weight_index(ctx.model, streamed.draws, streamed.site_slices))
    assert b["ess_mean_n"] == pytest.approx(m.n_eff)
    assert b["kl_squares_n"] == pytest.approx(
        pooled_n(
            squares_ess_from_moments(m.chain_mean, m.chain_var, m.n),
            m.chains * m.n,
            mean_ess(m.chain_mean, m.chain_var, m.n),
        )
    )
    # the KL's n from the groups' covariances: the stream's 8 groups are the draws path's
    # min(8, C) = 8, so the debiased KL and its error agree to rounding
    for k in ("kl_ess_n", "kl_bias_ess", "kl_debiased", "kl_debiased_se", "kl_debiased.layer1"):
        assert b[k] == pytest.approx(a[k], rel=1e-6), k


def test_weight_index_without_site_slices_is_flat_potentials_layout(tmp_path, cell_context):
    ctx = cell_context(_cell(tmp_path, BOSTON))
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    draws = {k: np.zeros((1, 2) + s) for k, s in pot.site_shapes.items()}
    idx = pmf.weight_index(ctx.model, draws, None)
    np.testing.assert_array_equal(idx, pmf.weight_index(ctx.model, draws, pot.site_slices))
    np.testing.assert_array_equal(idx, np.arange(pot.dim - 1))  # all but the noise


def test_kl_bias_ess_is_the_plug_in_bias_of_iid_draws(tmp_path, cell_context):
    # For iid Gaussian draws the plug-in KL's expected bias is kl_sampling_bias(N, D) with N
    # all the draws (tested against Monte Carlo in tests/reports).
    cell = _cell(tmp_path)
    ctx = cell_context(cell)
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    d = ctx.model.num_params
    probe = pmf.PriceOfMeanFieldProbe(cell.studies[0], ctx)
    rng = np.random.default_rng(12)
    # The KL's n comes from the spread of G group covariances: 1/n is unbiased, with a
    # relative sd (60 seeds of iid draws, D = 17) of 4.9% for G = 8 groups and 6.6% for
    # G = 4; the bias is ~ 1/n: bounds 4 sd. Moments path, 400 chains of 50 in 8 groups:
    c, n = 400, 50
    _, streamed = _posteriors(ctx, rng.normal(size=(c, n, pot.dim)), groups=8)
    out, _ = probe.finish(Fit(streamed, 0.0))
    assert out["kl_bias_ess"] == pytest.approx(kl_sampling_bias(c * n, d), rel=4 * 0.049)
    # the squares' reference from the moments: 400 chains give it within a few %
    assert out["kl_squares_n"] == pytest.approx(c * n, rel=0.05)
    # Draws path, 4 chains of 500: 4 groups of one chain
    draws_post, _ = _posteriors(ctx, rng.normal(size=(4, 500, pot.dim)))
    out, _ = probe.finish(Fit(draws_post, 0.0))
    assert out["kl_bias_ess"] == pytest.approx(kl_sampling_bias(2000, d), rel=4 * 0.066)


def test_new_metrics_are_none_where_they_do_not_apply(tmp_path, cell_context):
    # Ledoit-Wolf: the moments cannot give it (draws path) and the closed form is for the
    # sample covariance; too few draws: the closed form needs n > D
    cell = _cell(tmp_path, cov="ledoit_wolf")
    ctx = cell_context(cell)
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    _, streamed = _posteriors(ctx, _gaussian_flat(pot, chains=4, draws=40, seed=13))
    out, _ = pmf.PriceOfMeanFieldProbe(cell.studies[0], ctx).finish(Fit(streamed, 0.0))
    assert out["kl_source"] == "draws" and out["kl_ess_n"] > 0
    assert out["kl_bias_ess"] is None and out["kl_debiased"] is None
    assert out["kl_debiased_se"] is None and out["kl_debiased.layer1"] is None
    cell = _cell(tmp_path)
    ctx = cell_context(cell)
    _, few = _posteriors(ctx, _gaussian_flat(pot, chains=2, draws=4, seed=14), groups=2)
    out, _ = pmf.PriceOfMeanFieldProbe(cell.studies[0], ctx).finish(Fit(few, 0.0))
    assert out["kl_source"] == "moments" and (out["kl_ess_n"] or 0) <= 8
    assert out["kl_bias_ess"] is None and out["kl_debiased"] is None
    assert out["kl_debiased_se"] is None
    assert pmf.kl_bias_at(float("nan"), 3, "empirical") is None
    assert pmf.kl_bias_at(10.0, 3, "empirical") == kl_sampling_bias(10.0, 3)


def test_stop_at_grade_draws_on_until_its_gates_or_the_cap(tmp_path):
    # the KL target alone (10 draws' worth) stops at the first question; with gold's gates
    # (bulk ESS >= 400 of 2 chains' <= 35 draws each: never) the chains run to max_draws
    # (n_draws: all chains' draws)
    def stopped(**study):
        base = SPEC["studies"][0]
        spec = {**SPEC, "studies": [{**base, "kl_target_draws": 10, **study}]}
        m = run_cell(specs.load(tmp_path, spec).cells()[1], Runtime.cpu()).metrics
        return m["n_draws"], m["stop_rule_met"]

    n, met = stopped()
    assert n < 2 * 35 and met is True
    assert stopped(stop_at_grade="gold") == (2 * 35, False)  # at the cap, rule not met
