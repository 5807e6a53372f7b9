"""Tests for reports.diagnostics on synthetic chains with known behaviour."""

import json

import arviz_stats as azs
import numpy as np
import pytest
from arviz_base import from_dict
from matplotlib.figure import Figure

from reports.diagnostics import diagnostic_gates, posterior_summary, trace_rank_figure


def _tree(posterior, diverging=None):
    data = {"posterior": posterior}
    if diverging is not None:
        data["sample_stats"] = {"diverging": diverging}
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
    fig = trace_rank_figure(_tree(_iid(3, 80, seed=7)), n_params=3, seed=1)
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert len(axes) == 6
    labels = [ax.get_ylabel() for ax in axes[::2]]
    assert all(lab.startswith("layer0.weight[") for lab in labels)  # weights preferred
    assert len(axes[0].get_lines()) == 3  # one trace per chain
    assert list(tmp_path.iterdir()) == []
    # seeded choice; more rows than parameters is capped
    again = trace_rank_figure(_tree(_iid(3, 80, seed=7)), n_params=3, seed=1)
    assert [ax.get_ylabel() for ax in again.get_axes()[::2]] == labels
    assert len(trace_rank_figure(_tree({"a": np.zeros((1, 30))}), n_params=4).get_axes()) == 2


def test_missing_posterior_group_is_a_clear_error():
    dt = from_dict({"observed_data": {"y": np.zeros(3)}})
    with pytest.raises(ValueError, match="no posterior group"):
        posterior_summary(dt)
