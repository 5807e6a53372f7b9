"""Tests for reports.diagnostics on synthetic chains with known behaviour."""

import json

import arviz_stats as azs
import numpy as np
import pytest
from arviz_base import from_dict
from matplotlib.figure import Figure

from reports.diagnostics import (
    diagnostic_gates,
    posterior_summary,
    tree_depth_hits,
    worst_params,
)
from reports.figures.diagnostics import arviz_plots, arviz_plots_figures, trace_rank_figure
from reports.predictive import predictive_convergence
from reports.rank_ecdf import ecdf_band, rank_ecdf_difference


def _tree(posterior, diverging=None, **stats):
    data = {"posterior": posterior}
    if diverging is not None:
        stats["diverging"] = diverging
    if stats:
        data["sample_stats"] = stats
    dims = {"layer0.weight": ["layer0_out", "layer0_in"], "layer0.bias": ["layer0_out"]}
    return from_dict(data, dims={k: v for k, v in dims.items() if k in posterior})


def _iid(n_chains, n_draws, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "layer0.weight": rng.normal(size=(n_chains, n_draws, 3, 2)),
        "layer0.bias": rng.normal(size=(n_chains, n_draws, 3)),
        "noise": rng.normal(size=(n_chains, n_draws)),
    }


def _ar1(phi, n_chains, n_draws, seed):
    """Stationary AR(1) chains with unit marginal variance."""
    rng = np.random.default_rng(seed)
    x = np.empty((n_chains, n_draws))
    x[:, 0] = rng.normal(size=n_chains)
    eps = rng.normal(scale=np.sqrt(1 - phi**2), size=(n_chains, n_draws))
    for t in range(1, n_draws):
        x[:, t] = phi * x[:, t - 1] + eps[:, t]
    return x


def test_posterior_summary_matches_arviz_stats_and_numpy():
    post = _iid(2, 200)
    dt = _tree(post)
    s = posterior_summary(dt)
    assert list(s.columns) == ["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]
    assert len(s) == 6 + 3 + 1
    assert s.index[:3].tolist() == [
        "layer0.weight[0,0]",
        "layer0.weight[0,1]",
        "layer0.weight[1,0]",
    ]
    assert s.index[-1] == "noise"
    w = post["layer0.weight"]
    assert s.loc["layer0.weight[2,1]", "mean"] == pytest.approx(w[:, :, 2, 1].mean())
    assert s.loc["layer0.weight[2,1]", "sd"] == pytest.approx(w[:, :, 2, 1].std())
    ess = azs.ess(dt["posterior"].to_dataset(), method="tail")["layer0.weight"].values
    assert s.loc["layer0.weight[2,1]", "ess_tail"] == pytest.approx(ess[2, 1])
    rhat = azs.rhat(dt["posterior"].to_dataset())["layer0.bias"].values
    assert s.loc["layer0.bias[1]", "r_hat"] == pytest.approx(rhat[1])


def test_ess_of_ar1_chains_matches_closed_form():
    # ESS of a stationary AR(1) is N (1 - phi) / (1 + phi): 4 x 2000 draws, phi = 0.8 -> 889.
    # The estimator's relative sd at this size is about 10%; allow 30%.
    phi, n_chains, n_draws = 0.8, 4, 2000
    s = posterior_summary(_tree({"a": _ar1(phi, n_chains, n_draws, seed=1)}))
    expected = n_chains * n_draws * (1 - phi) / (1 + phi)
    assert s.loc["a", "ess_bulk"] == pytest.approx(expected, rel=0.3)


def test_gates_pass_for_well_mixed_iid_chains():
    # 4 x 1000 iid draws: r_hat - 1 has sd ~ 0.002, ess_bulk ~ 4000.
    d = diagnostic_gates(_tree(_iid(4, 1000), diverging=np.zeros((4, 1000), bool)))
    assert d.passed and d.failed == () and d.messages == ()
    assert (d.n_chains, d.n_draws, d.n_params, d.n_divergent) == (4, 1000, 10, 0)
    assert 1.0 - 0.01 < d.max_r_hat < 1.01
    assert d.min_ess_bulk > 2000 and d.min_ess_tail > 2000
    lo, mid, hi = d.ess_bulk_quantiles
    assert lo <= mid <= hi
    assert len(d.worst_r_hat) == 5 and d.worst_r_hat[0][1] == d.max_r_hat
    assert d.worst_ess_bulk[0][1] == d.min_ess_bulk


def test_gates_flag_stuck_chains_low_ess_and_divergences():
    rng = np.random.default_rng(2)
    post = _iid(2, 300, seed=3)
    post["layer0.weight"][1, :, 1, 0] += 3.0  # chain 1 sits elsewhere for one weight
    post["noise"] = _ar1(0.99, 2, 300, seed=4)  # ESS ~ 600 * 0.01 / 1.99 = 3
    div = rng.random((2, 300)) < 0.02
    d = diagnostic_gates(_tree(post, diverging=div))
    assert d.failed == ("r_hat", "ess_bulk", "divergences")
    assert d.worst_r_hat[0][0] == "layer0.weight[1,0]" and d.max_r_hat > 1.5
    # both the stuck weight and the sticky AR(1) chain have tiny ESS
    worst_ess = dict(d.worst_ess_bulk)
    assert set(list(worst_ess)[:2]) == {"noise", "layer0.weight[1,0]"}
    assert worst_ess["noise"] < 100 and d.min_ess_bulk < 100
    assert d.n_divergent == int(div.sum()) > 0
    assert "layer0.weight[1,0]" in d.messages[0] and "2 of 10" in d.messages[1]
    out = d.as_dict()
    json.dumps(out)
    assert out["passed"] is False and out["failed"] == ["r_hat", "ess_bulk", "divergences"]
    assert list(out["worst_r_hat"])[0] == "layer0.weight[1,0]"


def test_one_chain_has_no_r_hat_and_no_r_hat_gate():
    post = _iid(1, 500, seed=5)
    post["noise"] = np.linspace(0, 10, 500)[None]  # a drifting chain
    d = diagnostic_gates(_tree(post))
    assert d.max_r_hat is None and d.r_hat_quantiles is None and d.worst_r_hat == ()
    assert "r_hat" not in d.failed
    assert d.n_divergent is None and "divergences" not in d.failed
    assert np.isnan(posterior_summary(_tree(post))["r_hat"]).all()


def test_thresholds_are_configurable():
    dt = _tree(_iid(2, 100, seed=6))
    assert "ess_bulk" in diagnostic_gates(dt, ess_min=1e6).failed
    assert "r_hat" in diagnostic_gates(dt, r_hat_max=1.0).failed


def test_trace_rank_figure_returns_unsaved_figure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig = trace_rank_figure(_tree(_iid(3, 80, seed=7)), n_params=3)
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert len(axes) == 6
    assert len(axes[0].get_lines()) == 3  # one trace per chain
    assert len(axes[1].get_lines()) == 3 + 1  # one ECDF difference per chain, and zero
    assert list(tmp_path.iterdir()) == []
    # more rows than parameters is capped
    assert len(trace_rank_figure(_tree({"a": np.zeros((1, 30))}), n_params=4).get_axes()) == 2
    chosen = trace_rank_figure(_tree(_iid(2, 50)), params=["noise", "layer0.bias[1]"])
    assert [ax.get_title(loc="left").split(":")[0] for ax in chosen.get_axes()[::2]] == [
        "noise",
        "layer0.bias[1]",
    ]
    with pytest.raises(KeyError, match="nope"):
        trace_rank_figure(_tree(_iid(2, 50)), params=["nope"])


def test_arviz_plots_draws_the_same_worst_parameters_where_it_is_installed():
    if arviz_plots() is None:
        with pytest.raises(RuntimeError, match="pip install"):
            arviz_plots_figures(_tree(_iid(2, 50)))
        pytest.skip("arviz-plots >= 1.3 is not installed (CI's Python 3.12 job has it)")
    post = _iid(4, 200, seed=0)
    post["layer0.weight"][1, :, 2, 1] += 4.0
    trace, rank = arviz_plots_figures(_tree(post), n_params=3)
    ours = trace_rank_figure(_tree(post), n_params=3)
    picked = [ax.get_title(loc="left").split(":")[0] for ax in ours.get_axes()[::2]]
    assert {ax.get_title() for ax in rank.get_axes()} == set(picked)
    labels = {ax.get_ylabel() for ax in trace.get_axes()} | {
        ax.get_xlabel() for ax in trace.get_axes()
    }
    assert set(picked) <= labels


def test_trace_rank_figure_shows_the_worst_mixing_parameters():
    # Of 10 parameters, two mix badly: one weight whose chain 1 sits elsewhere and a sticky
    # AR(1) bias (both r_hat > 1.1, iid ones ~ 1.00 +- 0.005); they are the first two rows
    # whatever the seed of the draws, the larger r_hat first.
    for seed in range(3):
        post = _iid(4, 200, seed=seed)
        post["layer0.weight"][1, :, 2, 1] += 4.0
        post["layer0.bias"][:, :, 0] = _ar1(0.995, 4, 200, seed=seed)
        fig = trace_rank_figure(_tree(post), n_params=3)
        rows = [ax.get_title(loc="left").split(":")[0] for ax in fig.get_axes()[::2]]
        assert set(rows[:2]) == {"layer0.weight[2,1]", "layer0.bias[0]"}, rows
        rhat = posterior_summary(_tree(post))["r_hat"]
        assert rhat[rows[0]] >= rhat[rows[1]] >= rhat[rows[2]]
    # one chain: no r_hat, the smallest ESS first
    post = _iid(1, 400, seed=4)
    post["noise"] = _ar1(0.99, 1, 400, seed=5)
    assert worst_params(posterior_summary(_tree(post)), 1) == ["noise"]


def test_rank_ecdf_band_has_its_coverage_and_flags_a_shifted_chain():
    # The simultaneous band holds a whole ECDF of n uniforms with probability 0.95: over
    # 2000 fresh samples (seeds other than the band's) the coverage has sd 0.005; allow 0.02.
    n, grid = 150, np.arange(1, 41) / 41
    lower, upper = ecdf_band(n, grid)
    rng = np.random.default_rng(123)
    u = np.sort(rng.random((2000, n)), axis=1)
    ecdf = np.stack([np.searchsorted(row, grid, side="right") / n for row in u])
    inside = np.all((ecdf >= lower) & (ecdf <= upper), axis=1).mean()
    assert inside == pytest.approx(0.95, abs=0.02)
    # mixed chains: each stays inside with probability >= 0.95 (ranks drawn without
    # replacement vary less than the band assumes); 4 x 200 chains, sd of the rate ~ 0.008
    g = rank_ecdf_difference(x := rng.normal(size=(4, n)), n_grid=40)[0]
    assert np.allclose(g, grid)
    outside = []
    for _ in range(200):
        _, diff = rank_ecdf_difference(rng.normal(size=(4, n)), n_grid=40)
        outside += np.any((diff < lower - g) | (diff > upper - g), axis=1).tolist()
    assert np.mean(outside) < 0.05 + 0.025
    # four chains, chain 2 shifted by one sd: it leaves the band, further than any other
    x[2] += 1.0
    _, diff = rank_ecdf_difference(x, n_grid=40)
    assert np.any((diff[2] < lower - g) | (diff[2] > upper - g))
    assert np.abs(diff).max(axis=1).argmax() == 2
    assert diff[2].max() < 0.0 < diff[[0, 1, 3]].max()  # the high chain's ranks come late


def test_missing_posterior_group_is_a_clear_error():
    dt = from_dict({"observed_data": {"y": np.zeros(3)}})
    with pytest.raises(ValueError, match="no posterior group"):
        posterior_summary(dt)


def test_a_sampler_that_never_moved_fails_the_r_hat_and_ess_gates():
    # Two chains that never left their starting point: arviz-stats gives NaN r_hat and ESS
    # for every parameter. Those must fail the gates, not drop out of them.
    start = _iid(1, 1, seed=8)
    post = {k: np.repeat(v, 50, axis=1).repeat(2, axis=0) for k, v in start.items()}
    d = diagnostic_gates(_tree(post))
    assert {"r_hat", "ess_bulk"} <= set(d.failed)
    assert np.isnan(d.max_r_hat) and np.isnan(d.min_ess_bulk)
    assert d.n_nonfinite_r_hat == d.n_params == d.n_nonfinite_ess
    assert "never moved" in d.messages[0] and "10 of 10" in d.messages[0]
    json.dumps(d.as_dict())
    # one stuck parameter among mixed ones is enough; the others' numbers stay readable
    post = _iid(4, 400, seed=9)
    post["noise"] = np.zeros((4, 400))
    d = diagnostic_gates(_tree(post))
    assert d.failed == ("r_hat", "ess_bulk")
    assert d.worst_r_hat[0][0] == "noise" and np.isnan(d.worst_r_hat[0][1])
    assert d.r_hat_quantiles[2] < 1.01 and d.ess_bulk_quantiles[0] > 1000
    assert "1 of 10" in d.messages[0] and d.n_nonfinite_r_hat == 1


def test_tree_depth_gate_counts_transitions_at_the_limit():
    rng = np.random.default_rng(10)
    depth = rng.integers(1, 6, size=(4, 300))  # depths 1..5
    hits = int((depth >= 5).sum())
    dt = _tree(_iid(4, 300), diverging=np.zeros((4, 300), bool), tree_depth=depth)
    d = diagnostic_gates(dt, max_tree_depth=5)
    assert d.failed == ("tree_depth",)
    assert (d.n_max_tree_depth, d.n_transitions, d.max_tree_depth) == (hits, 1200, 5)
    assert d.messages == (f"tree_depth: {hits} of 1200 transitions hit max_tree_depth (5)",)
    assert diagnostic_gates(dt, max_tree_depth=6).passed  # nothing reached 6
    # the limit as the run stores it: the method's settings in the root attributes
    dt.attrs["settings"] = json.dumps({"kind": "nuts", "max_tree_depth": 5})
    assert diagnostic_gates(dt).n_max_tree_depth == hits
    # only leapfrog steps recorded: a full tree of depth D has 2^D - 1 steps
    steps = _tree(_iid(2, 10), n_steps=np.array([[31, 7] * 5, [31] * 10]))
    assert tree_depth_hits(steps, max_tree_depth=5) == (15, 20)
    # HMC (no tree depth) and variational draws: no gate
    hmc = _tree(_iid(2, 50), diverging=np.zeros((2, 50), bool))
    assert tree_depth_hits(hmc, 5) is None
    assert diagnostic_gates(hmc, max_tree_depth=5).n_max_tree_depth is None


def test_predictive_convergence_flags_chains_that_disagree_on_a_prediction():
    # 4 chains x 500 iid draws of 6 points' class probabilities (logistic of normals): R-hat
    # near 1 and ESS near the 2000 draws; shifting one chain's logits at point 2 only makes
    # that point's R-hat large; a point whose probability never moves is counted, not used
    rng = np.random.default_rng(0)
    p1 = 1 / (1 + np.exp(-rng.normal(size=(4, 500, 6))))
    p1[..., 0] = 0.25  # constant: no R-hat
    probs = np.stack([1 - p1, p1], -1)
    ok = predictive_convergence(probs)
    assert ok["n_pred_constant"] == 1
    assert ok["max_r_hat_pred"] < 1.01 and ok["min_ess_bulk_pred"] > 1000
    # the shift changes one chain's mean by 2 standard deviations of the logit
    p_bad = p1.copy()
    p_bad[0, :, 2] = 1 / (1 + np.exp(-(rng.normal(size=500) + 2.0)))
    bad = predictive_convergence(np.stack([1 - p_bad, p_bad], -1))
    assert bad["max_r_hat_pred"] > 1.1 and bad["median_r_hat_pred"] < 1.01
    # three classes: every class is a value; one chain: no R-hat, but an ESS
    three = rng.dirichlet([1, 1, 1], size=(1, 300, 2))
    one = predictive_convergence(three)
    assert one["max_r_hat_pred"] is None and one["min_ess_bulk_pred"] > 100
    with pytest.raises(ValueError, match="chain, draw, point, class"):
        predictive_convergence(three[0])
