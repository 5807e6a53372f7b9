"""A cell's ArviZ file means what ArviZ says: PSIS-LOO on it is leave-one-out of the training data.

On Bayesian linear regression with known noise (a depth-0 network with a Gaussian
likelihood and a Normal prior) the posterior is Gaussian and exact draws are cheap; the
exact leave-one-out predictive density of each training point is closed-form (refit the
posterior without the point, evaluate its predictive density). ``arviz_stats.loo`` on the
tree the cell writer builds must agree with it within Monte Carlo error, and the held-out
test score must be where the schema puts held-out data (``log_likelihood_test``,
``predictions``). Then a real tiny cell of every sampled method writes that schema.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import arviz_stats as azs
import numpy as np
import pytest
import torch

import zoo.data
import zoo.models
from zoo.data import Dataset, TorchData
from zoo.execution import evaluate
from zoo.execution.arviz_io import (
    DRAWS_GUIDE,
    DRAWS_MCMC,
    SAMPLE_STATS,
    datatree_attrs,
    datatree_from_bytes,
    datatree_to_bytes,
    heldout_lpd,
)
from zoo.execution.cell import run_cell
from zoo.execution.evaluate import posterior_datatree
from zoo.runtime import Runtime
from zoo.spec.load import load_spec
from zoo.spec.sections.likelihoods import CategoricalLikelihood, GaussianLikelihood
from zoo.spec.sections.models import MLPModel
from zoo.spec.sections.priors import NormalPrior

SIGMA, TAU = 0.5, 1.0  # known noise sd, prior sd of every weight and the bias
N_TRAIN, N_TEST, D = 30, 20, 2
CHAINS, DRAWS = 4, 1000
S = CHAINS * DRAWS


def _gaussian_logpdf(y, mean, var):
    return -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)


def _posterior(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the coefficients given design ``z`` and targets ``y``."""
    cov = np.linalg.inv(z.T @ z / SIGMA**2 + np.eye(z.shape[1]) / TAU**2)
    return cov @ z.T @ y / SIGMA**2, cov


def _mc_sd(w: np.ndarray) -> float:
    """Delta-method sd of ``sum_i log mean_s w_si`` over independent draws ``s``."""
    g = (w / w.mean(0)).sum(1)
    return float(g.std() / np.sqrt(len(w)))


@pytest.fixture(scope="module")
def conjugate():
    """Data, the exact posterior, its draws and the cell writer's tree (read back from bytes)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_TRAIN + N_TEST, D))
    y = x @ np.array([1.0, -0.5]) + 0.3 + SIGMA * rng.normal(size=len(x))
    z = np.hstack([x, np.ones((len(x), 1))])  # weights, then the bias
    x_train, x_test, y_train, y_test = x[:N_TRAIN], x[N_TRAIN:], y[:N_TRAIN], y[N_TRAIN:]
    ds = Dataset(x_train, y_train, x_test, y_test, n_classes=0)
    data = TorchData(*(torch.as_tensor(a) for a in (x_train, y_train, x_test, y_test)))
    spec = SimpleNamespace(
        model=MLPModel(kind="mlp", depth=0),
        prior=NormalPrior(kind="normal", scale=TAU),
        likelihood=GaussianLikelihood(kind="gaussian", noise=SIGMA),
    )
    model = zoo.models.build(spec, ds)
    assert list(model.site_info()) == ["layer0.weight", "layer0.bias"]
    mean, cov = _posterior(z[:N_TRAIN], y_train)
    beta = rng.multivariate_normal(mean, cov, size=S)  # exact, independent: chain-major
    draws = {
        "layer0.weight": torch.as_tensor(beta[:, None, :D]),
        "layer0.bias": torch.as_tensor(beta[:, D:]),
    }
    dt = posterior_datatree(
        model,
        ds,
        data,
        draws,
        chains=CHAINS,
        gen=Runtime.cpu(torch.float64).generator(1),
        draws_kind=DRAWS_MCMC,
        library=("bnn-zoo", "test"),
        attrs={"method": "exact"},
    )
    dt = datatree_from_bytes(datatree_to_bytes(dt))
    return SimpleNamespace(
        z=z, y=y, mean=mean, cov=cov, beta=beta, dt=dt, args=(model, ds, data, draws)
    )


def test_psis_loo_of_the_cell_file_is_exact_leave_one_out(conjugate):
    c = conjugate
    z, y = c.z[:N_TRAIN], c.y[:N_TRAIN]
    exact = np.empty(N_TRAIN)
    for i in range(N_TRAIN):  # refit without point i, then its predictive density
        keep = np.arange(N_TRAIN) != i
        mean, cov = _posterior(z[keep], y[keep])
        exact[i] = _gaussian_logpdf(y[i], z[i] @ mean, SIGMA**2 + z[i] @ cov @ z[i])

    loo = azs.loo(c.dt, pointwise=True)
    assert loo.n_data_points == N_TRAIN and loo.n_samples == S
    assert float(loo.pareto_k.max()) < 0.5

    # Monte Carlo error of the importance-sampling estimate sum_i -log mean_s r_si with
    # r_si = 1 / p(y_i | theta_s), by the delta method over the independent draws
    # (its linearization is -sum_i r_si / mean(r_i), with the points' correlation kept).
    lik = np.exp(_gaussian_logpdf(y, c.beta @ z.T, SIGMA**2))  # (S, N_TRAIN)
    ratio = 1 / lik
    tol = 4 * _mc_sd(ratio)
    sd_i = ratio.std(0) / (np.sqrt(S) * ratio.mean(0))
    assert abs(loo.elpd - exact.sum()) < tol, (loo.elpd, exact.sum(), tol)
    np.testing.assert_allclose(loo.elpd_i.values, exact, atol=5 * sd_i.max())

    # The check is sharp: the in-sample lppd, which overfits by about the number of
    # coefficients (3), lies far outside the tolerance; so did the old file's test-set
    # log-likelihood (a sum over N_TEST other points).
    lppd = np.log(lik.mean(0)).sum()
    assert lppd - exact.sum() > 2 > 10 * tol
    assert loo.p == pytest.approx(lppd - exact.sum(), abs=tol)


def test_the_test_set_score_is_where_the_schema_puts_held_out_data(conjugate):
    c = conjugate
    z, y = c.z[N_TRAIN:], c.y[N_TRAIN:]
    pred_mean = z @ c.mean
    pred_var = SIGMA**2 + np.einsum("ij,jk,ik->i", z, c.cov, z)
    exact = _gaussian_logpdf(y, pred_mean, pred_var)

    dt = c.dt
    assert dt["log_likelihood_test"].sizes["test_id"] == N_TEST
    assert dt["log_likelihood"].sizes["obs_id"] == N_TRAIN
    held = heldout_lpd(dt)
    lik = np.exp(_gaussian_logpdf(y, c.beta @ z.T, SIGMA**2))  # (S, N_TEST)
    assert held.n == N_TEST
    assert abs(held.lpd - exact.sum()) < 4 * _mc_sd(lik), (held.lpd, exact.sum())

    # predictions: one draw of y per posterior draw at the test inputs, scored against the
    # test targets stored beside the test inputs
    pred = dt["predictions"]["y"].transpose("chain", "draw", "test_id").values
    assert pred.shape == (CHAINS, DRAWS, N_TEST) and pred.dtype == np.float32
    pred = pred.reshape(S, N_TEST)
    zscore = (pred.mean(0) - pred_mean) / np.sqrt(pred_var / S)
    assert np.abs(zscore).max() < 4.5
    np.testing.assert_allclose(pred.var(0), pred_var, rtol=0.15)
    pcd = dt["predictions_constant_data"]
    np.testing.assert_allclose(pcd["x"].values, z[:, :D], rtol=1e-6)
    np.testing.assert_allclose(pcd["y"].values, y, rtol=1e-6)
    # and the training data beside the training log-likelihood
    np.testing.assert_allclose(dt["observed_data"]["y"].values, c.y[:N_TRAIN], rtol=1e-6)
    np.testing.assert_allclose(dt["constant_data"]["x"].values, c.z[:N_TRAIN, :D], rtol=1e-6)
    assert dt["posterior_predictive"]["y"].sizes == {
        "chain": CHAINS,
        "draw": DRAWS,
        "obs_id": N_TRAIN,
    }


def test_large_inputs_are_left_out_and_chunks_change_nothing(conjugate, monkeypatch):
    model, ds, data, draws = conjugate.args
    monkeypatch.setattr(evaluate, "MAX_INPUT_VALUES", N_TEST * D)  # x_test fits, x_train not
    monkeypatch.setattr(evaluate, "CHUNK_VALUES", 7 * S)  # chunks of 7 inputs, same draws
    dt = posterior_datatree(
        model, ds, data, draws, chains=CHAINS, gen=Runtime.cpu(torch.float64).generator(1)
    )
    assert "constant_data" not in dt.children
    assert "x_train left out" in dt.attrs["constant_data_note"]
    assert set(dt["predictions_constant_data"].data_vars) == {"x", "y"}
    for group in ("log_likelihood", "log_likelihood_test", "predictions"):
        np.testing.assert_array_equal(dt[group]["y"].values, conjugate.dt[group]["y"].values)


def test_class_draws_follow_the_predictive_probabilities():
    probs = np.array([0.2, 0.3, 0.5])
    n, n_draws = 4, 20_000
    ds = Dataset(np.zeros((n, 1)), np.zeros(n, np.int64), np.zeros((1, 1)), np.zeros(1), 3)
    spec = SimpleNamespace(
        model=MLPModel(kind="mlp", depth=0),
        prior=NormalPrior(kind="normal", scale=1.0),
        likelihood=CategoricalLikelihood(kind="categorical"),
    )
    model = zoo.models.build(spec, ds)
    draws = {
        "layer0.weight": torch.zeros(n_draws, 3, 1, dtype=torch.float64),
        "layer0.bias": torch.log(torch.as_tensor(probs)).expand(n_draws, 3),
    }
    x, y = torch.zeros(n, 1, dtype=torch.float64), torch.tensor([0, 1, 2, 2])
    ll, rep = evaluate.pointwise(model, x, y, draws, n_classes=3, gen=Runtime.cpu().generator(0))
    np.testing.assert_allclose(ll[0].numpy(), np.log(probs[[0, 1, 2, 2]]), rtol=1e-12)
    freq = np.stack([(rep.numpy() == k).mean(0) for k in range(3)], 1)  # (n, 3)
    sd = np.sqrt(probs * (1 - probs) / n_draws)
    assert np.all(np.abs(freq - probs) < 4.5 * sd), freq


SPEC = """\
name: loo
seed: 2
data: {kind: two_moons, n_train: 60, n_test: 40, noise: 0.1}
model: {kind: mlp, depth: 1, width: 4, activation: tanh}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, pretrain_epochs: 1, steps: 15,
     batch_size: 20, predictive_samples: 30}
  - {name: nuts, kind: nuts, init_from: mfvi, warmup: 10, draws: 30, chains: 2,
     vectorize_chains: true, max_tree_depth: 3, predictive_draws: 5}
  - {name: hmc, kind: hmc, warmup: 10, draws: 30, num_steps: 2, predictive_draws: 5}
studies: []
"""


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("loo")) / "s.yaml"
    path.write_text(SPEC)
    out = {}
    for cell in load_spec(path).cells():
        res = run_cell(cell, Runtime.cpu())
        out[cell.method.name] = (cell, res, datatree_from_bytes(res.artifacts[".nc"]))
    return out


@pytest.mark.parametrize("name", ["mfvi", "nuts", "hmc"])
def test_a_real_cell_writes_the_schema(cells, name):
    cell, res, dt = cells[name]
    ds = zoo.data.load(cell.spec.data, cell.spec.seed)
    assert {
        "posterior",
        "log_likelihood",
        "posterior_predictive",
        "observed_data",
        "constant_data",
        "predictions",
        "log_likelihood_test",
        "predictions_constant_data",
    } <= set(dt.children)
    chains, draws = dt["posterior"].sizes["chain"], dt["posterior"].sizes["draw"]
    for group, dim, n in (
        ("log_likelihood", "obs_id", 60),
        ("posterior_predictive", "obs_id", 60),
        ("predictions", "test_id", 40),
        ("log_likelihood_test", "test_id", 40),
    ):
        assert dt[group]["y"].dims == ("chain", "draw", dim), group
        assert dt[group]["y"].shape == (chains, draws, n), group
    np.testing.assert_array_equal(dt["observed_data"]["y"].values, ds.y_train)
    np.testing.assert_array_equal(dt["constant_data"]["x"].values, ds.x_train)
    np.testing.assert_array_equal(dt["predictions_constant_data"]["y"].values, ds.y_test)
    np.testing.assert_array_equal(dt["predictions_constant_data"]["x"].values, ds.x_test)
    for group in ("observed_data", "posterior_predictive", "predictions"):
        assert dt[group]["y"].dtype == np.int8, group  # two classes
    assert dt["log_likelihood"]["y"].dtype == np.float32

    attrs = datatree_attrs(dt)
    sampler = name != "mfvi"
    assert attrs["draws_kind"] == (DRAWS_MCMC if sampler else DRAWS_GUIDE)
    assert attrs["inference_library"] == ("bnn-zoo" if sampler else "pyro")
    assert attrs["inference_library_version"]
    assert attrs["method"] == name

    # arviz-stats reads the training points (30 draws or more: PSIS needs 5 in its tail);
    # the held-out score is apart from them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto k of a few draws of a tiny fit
        assert azs.loo(dt).n_data_points == 60
    held = heldout_lpd(dt)
    assert held.n == 40
    if name == "mfvi":  # the file holds the very draws the test metrics were computed from
        assert -held.lpd / held.n == pytest.approx(res.metrics["nll"], rel=1e-5)

    stats = set(dt["sample_stats"].data_vars) if "sample_stats" in dt.children else set()
    expected = {
        "nuts": set(SAMPLE_STATS),
        "hmc": set(SAMPLE_STATS) - {"tree_depth", "reached_max_treedepth"},
        "mfvi": set(),
    }
    assert stats == expected[name]
    if name == "nuts":
        depth = dt["sample_stats"]["tree_depth"]
        assert depth.dtype == np.int8 and int(depth.max()) <= 3  # max_tree_depth
