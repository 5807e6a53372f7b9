"""The price-of-mean-field study: output-column KL, the stopping rule, a sampled cell."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import zoo.studies.price_of_mf.probe as pmf
from reports.draws import flatten_sites
from reports.gaussian import fit_gaussian
from zoo.inference.mcmc.potential import FlatPotential
from zoo.run.cell import run_cell
from zoo.runtime import Runtime
from zoo.spec.load import load_spec
from zoo.spec.sections.studies import GaussianFitSpec

SPEC = """\
name: pmf
seed: 0
data: {kind: two_moons, n_train: 60, n_test: 50, noise: 0.1}
model: {kind: mlp, depth: 1, width: 3}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 20, predictive_samples: 5}
  - {name: nuts, kind: nuts, init_from: mfvi, warmup: 20, draws: 10, chains: 2,
     vectorize_chains: true, max_tree_depth: 4, predictive_draws: 10}
studies:
  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, kl_target_draws: 100000,
     max_draws: 35}
"""


def test_kl_output_columns_sums_the_closed_form_pair_kls():
    # Two classes: each output column (w[0, j], w[1, j]) and the bias pair is a correlated
    # pair; a 2x2 block's KL(q_diag || q_full) is -log(1 - r^2) / 2 with r the correlation of
    # the fitted covariance. Hidden-layer weights are independent and do not enter.
    rng = np.random.default_rng(0)
    s, rhos = 4000, [-0.8, -0.4, 0.0, 0.6]
    pairs = [rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=s) for r in rhos]
    w_out = np.stack(pairs[:3], axis=2)  # (S, 2, 3): column j is pair j
    sites = {"layer0.weight": rng.normal(size=(1, s, 3, 2)),
             "layer0.bias": rng.normal(size=(1, s, 3)),
             "layer1.weight": w_out[None], "layer1.bias": pairs[3][None]}  # fmt: skip
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


def test_stopping_rule_sees_the_weight_columns_of_the_flat_draws(tmp_path, monkeypatch,
                                                                 cell_context):  # fmt: skip
    # a learned noise sits after the weights in the flat vector; the rule must leave it out
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.replace("data: {kind: two_moons, n_train: 60, n_test: 50, noise: 0.1}",
                              "data: {kind: uci, name: boston}\nlikelihood: {kind: gaussian, "
                              "noise: learned}"))  # fmt: skip
    cell = load_spec(p).cells()[1]
    ctx = cell_context(cell)
    pot = FlatPotential(ctx.model, ctx.data.x_train, ctx.data.y_train)
    flat = np.random.default_rng(0).normal(size=(2, 30, pot.dim)).astype(np.float32)
    cols = np.concatenate([np.arange(sl.start, sl.stop) for name, sl in pot.site_slices.items()
                           if name.startswith("layer")])  # fmt: skip
    seen = {}

    class _Null:
        iid_draws = 7

    def spy(draws, **kw):
        seen.update(draws=draws, **kw)
        return _Null()

    monkeypatch.setattr(pmf, "kl_shift_null", spy)
    rule = pmf.kl_draws_rule(ctx.model, cell.studies[0], seed=5)
    with torch.no_grad():
        sites = {k: v.numpy() for k, v in pot.unravel(torch.from_numpy(flat)).items()}
    assert rule(sites) is False  # 7 < 100000
    np.testing.assert_array_equal(seen["draws"], flat[..., cols])
    assert seen["reps"] == 4 and seen["seed"] == 9 and seen["cov"] == "empirical"


def test_sampled_cell_records_the_price_of_mean_field(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC)
    cell = load_spec(p).cells()[1]
    out = run_cell(cell, Runtime.cpu())
    m = out.metrics
    for k in ("kl_diag_full", "kl_null", "kl_excess", "kl_null_draws", "kl_output_columns",
              "w2_diag_full", "agreement_vi", "tv_vi", "max_r_hat", "min_ess_bulk"):  # fmt: skip
        assert k in m, k
    # the target is out of reach: the chains drew up to the cap, in rounds of 25 past draws
    assert m["draws_per_chain"] == 35
    assert set(out.artifacts) == {".nc"}
