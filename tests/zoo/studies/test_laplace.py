"""The Laplace study: exact on Bayesian linear regression; end to end on a tiny MLP cell; its
H as a ground-truth target; a depth x width grid."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.linalg import inv, sqrtm

import zoo.models
from reports.ground_truth import kl_true
from reports.laplace import axis_effects
from tests import specs
from zoo.cli import main
from zoo.data import Dataset
from zoo.execution.runner import run_spec
from zoo.spec.sections.likelihoods import GaussianLikelihood
from zoo.spec.sections.models import MLPModel
from zoo.spec.sections.priors import NormalPrior
from zoo.studies.laplace.curvature import flat_weights, ggn, hessian, neg_log_posterior
from zoo.studies.laplace.probe import PRECISION_ARTIFACT, laplace_metrics
from zoo.studies.price_of_mf.ground_truth import load_cov

SIGMA, S = 0.5, 2.0


@pytest.fixture(scope="module")
def linreg():
    """A linear model (mlp of depth 0) with a Gaussian prior and Gaussian noise."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5]) + 0.3 + SIGMA * rng.normal(size=40)).astype(np.float32)
    spec = SimpleNamespace(
        model=MLPModel(kind="mlp", depth=0),
        prior=NormalPrior(kind="normal", scale=S),
        likelihood=GaussianLikelihood(kind="gaussian", noise=SIGMA),
    )
    net = zoo.models.build(spec, Dataset(x, y, x, y, 0))
    x1 = np.c_[x.astype(np.float64), np.ones(len(x))]  # weights then the bias, as flattened
    h = x1.T @ x1 / SIGMA**2 + np.eye(4) / S**2
    mean = np.linalg.solve(h, x1.T @ y.astype(np.float64) / SIGMA**2)
    return net, x, y, h, mean


def test_hessian_and_ggn_are_the_closed_form(linreg):
    net, x, y, h, _ = linreg
    flat = flat_weights(net)
    xt, yt = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    z = torch.randn(flat.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = neg_log_posterior(net, flat, xt, yt)
    np.testing.assert_allclose(hessian(u, z, width=4, n=len(x)).numpy(), h, rtol=1e-12)
    np.testing.assert_allclose(ggn(net, flat, z, xt, yt).numpy(), h, rtol=1e-12)


@pytest.mark.parametrize("curvature", ["hessian", "ggn"])
def test_kl_and_w2_equal_the_exact_posterior_closed_form(linreg, curvature):
    net, x, y, h, mean = linreg
    start = {"layer0.weight": torch.zeros(1, 3), "layer0.bias": torch.zeros(1)}
    res = laplace_metrics(
        net, torch.as_tensor(x), torch.as_tensor(y), start, curvature=curvature, refine_steps=50
    )
    # the exact posterior is N(mean, h^-1); its KL-optimal diagonal Gaussian has variances
    # 1 / h_ii, and the KL between two Gaussians by the textbook formula
    cov, diag = inv(h), np.diag(1 / np.diag(h))
    kl = 0.5 * (np.trace(h @ diag) - 4 + np.linalg.slogdet(cov)[1] - np.linalg.slogdet(diag)[1])
    rd = sqrtm(diag).real
    w2 = np.sqrt(np.trace(diag) + np.trace(cov) - 2 * np.trace(sqrtm(rd @ cov @ rd).real))
    assert res["laplace_kl"] == pytest.approx(kl, rel=1e-9)
    assert res["laplace_kl"] == pytest.approx(
        0.5 * (np.log(np.diag(h)).sum() - np.linalg.slogdet(h)[1]), rel=1e-9
    )
    assert res["laplace_w2"] == pytest.approx(w2, rel=1e-6)
    assert res["laplace_kl_layer0"] == pytest.approx(kl, rel=1e-9)  # one layer: the whole
    assert res["laplace_grad_norm"] < 1e-5 and res["laplace_refine_iters"] > 0
    assert res["laplace_refine_shift"] == pytest.approx(np.linalg.norm(mean), rel=1e-6)


SPEC = specs.spec(
    "laplace",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=30, noise=0.1),
    model=specs.mlp(depth=2, width=3),
    likelihood=specs.section("bernoulli"),
    inference=[
        specs.method("map", "map", steps=50),
        specs.svi("mfvi", steps=20, batch_size=30, predictive_samples=3),
    ],
    studies=[specs.study("laplace", refine_steps=30)],
    report={"x": "model.depth", "figures": ["accuracy"]},
)


def test_a_tiny_mlp_run_writes_the_laplace_metrics(tmp_path: Path):
    spec = specs.load(tmp_path, SPEC)
    out = run_spec(spec, tmp_path / "run", workers=1, progress=False, log=lambda m: None)
    assert out.n_failed == 0, pd.read_csv(tmp_path / "run" / "results.csv")["error"].tolist()
    res = pd.read_csv(tmp_path / "run" / "results.csv")
    assert len(res) == 2
    for col in (
        "laplace_kl",
        "laplace_w2",
        "laplace_kl_layer0",
        "laplace_kl_layer2",
        "laplace_w2_layer1",
        "laplace_kl_marginal_layer2",
        "laplace_grad_norm",
    ):
        assert col in res.columns and res[col].notna().all(), col
    assert (res["laplace_kl"] > 0).all() and (res["laplace_min_eig"] > 0).all()
    assert (res["laplace_dim"] == 3 * 3 + 4 * 3 + 4 * 1).all()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "The price of mean field at a mode (Laplace)" in report


SAVED = specs.spec(
    "laplace_target",
    seed=0,
    data=specs.two_moons(n_train=80, n_test=30, noise=0.1),
    model=specs.mlp(depth=1, width=3),
    likelihood=specs.section("bernoulli"),
    inference=[specs.method("map", "map", steps=100, lr=0.05)],
    studies=[specs.study("laplace", refine_steps=50, save_precision=True)],
    report={"x": "model.depth", "figures": ["accuracy"]},
)


def test_the_saved_precision_is_a_valid_ground_truth_target(tmp_path: Path):
    """save_precision stores H; the Gaussian ground truth takes it as cov_file (precision)."""
    out = run_spec(
        specs.load(tmp_path, SAVED),
        tmp_path / "run",
        workers=1,
        progress=False,
        log=lambda m: None,
    )
    assert out.n_failed == 0
    res = pd.read_csv(tmp_path / "run" / "results.csv").iloc[0]
    (path,) = (tmp_path / "run" / "cells").glob(f"*{PRECISION_ARTIFACT}")
    h = np.load(path, allow_pickle=False)
    assert h.shape == (13, 13) and h.dtype == np.float64 and np.array_equal(h, h.T)
    assert np.linalg.eigvalsh(h)[0] == pytest.approx(res["laplace_min_eig"], rel=1e-8)
    assert 0.5 * (np.log(np.diag(h)).sum() - np.linalg.slogdet(h)[1]) == pytest.approx(
        res["laplace_kl"], rel=1e-9
    )
    sim = SimpleNamespace(cov_file=str(path), file_holds="precision")
    cov = load_cov(sim)  # what the simulation samples: S = H^-1, symmetric positive definite
    np.testing.assert_allclose(cov @ h, np.eye(13), atol=1e-8)
    assert kl_true(cov) == pytest.approx(res["laplace_kl"], rel=1e-6)
    # and the simulation runs on it (short chains: the pipeline, not its accuracy)
    short = {"chains": 4, "groups": 2, "warmup": 100, "draws": 100, "null_reps": 2}
    sim = specs.simulation(
        "gaussian", "g", seed=0, cov_file=str(path), file_holds="precision", **short
    )
    specs.write_spec(tmp_path, sim, file="g.yaml")
    assert (
        main(["run", str(tmp_path / "g.yaml"), "--out", str(tmp_path / "g"), "--no-progress"]) == 0
    )
    g = pd.read_csv(tmp_path / "g" / "results.csv").iloc[0]
    assert g["dim"] == 13 and g["kl_true"] == pytest.approx(res["laplace_kl"], rel=1e-6)


def test_no_artifact_unless_asked(tmp_path: Path):
    unsaved = {**SAVED, "studies": [specs.study("laplace", refine_steps=50)]}
    run_spec(
        specs.load(tmp_path, unsaved),
        tmp_path / "run",
        workers=1,
        progress=False,
        log=lambda m: None,
    )
    assert not list((tmp_path / "run" / "cells").glob(f"*{PRECISION_ARTIFACT}"))


def test_axis_effects_recover_a_power_law():
    d, w = np.meshgrid([1.0, 2, 4, 8], [4.0, 8, 16], indexing="ij")
    y = 3.0 * d**1.5 * w**0.25
    eff = axis_effects(y.ravel(), {"depth": d.ravel(), "width": w.ravel()})
    assert eff.slopes["depth"] == pytest.approx(1.5) and eff.slopes["width"] == pytest.approx(0.25)
    assert eff.r2 == pytest.approx(1.0) and eff.n == 12 and eff.se["depth"] < 1e-8
    noisy = y.ravel() * np.exp(np.random.default_rng(0).normal(0, 0.1, 12))
    eff = axis_effects(
        np.r_[noisy, 0.0], {"depth": np.r_[d.ravel(), 1], "width": np.r_[w.ravel(), 4]}
    )
    assert eff.n == 12 and abs(eff.slopes["depth"] - 1.5) < 3 * eff.se["depth"]
    assert np.isnan(axis_effects([1.0, 2.0], {"depth": [1, 2], "width": [4, 4]}).slopes["depth"])


GRID = specs.spec(
    "grid",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=30, noise=0.1),
    model=specs.mlp(depth=1, width=2),
    likelihood=specs.section("bernoulli"),
    inference=[specs.method("map", "map", steps=60, lr=0.05)],
    studies=[specs.study("laplace", refine_steps=30)],
    sweep={"model.depth": [1, 2], "model.width": [2, 4]},
    report={"x": "model.depth", "hue": "model.width", "figures": ["laplace_kl"]},
)


def test_a_depth_by_width_grid_reports_both_axes(tmp_path: Path):
    out = run_spec(
        specs.load(tmp_path, GRID),
        tmp_path / "run",
        workers=1,
        progress=False,
        log=lambda m: None,
    )
    assert out.n_failed == 0
    res = pd.read_csv(tmp_path / "run" / "results.csv")
    assert len(res) == 4 and res["laplace_kl"].notna().all()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "laplace_kl (map), model.depth down, model.width across" in report
    assert "laplace_kl / D (map)" in report and "elasticities" in report
    # the per-cell table keeps the width apart (4 rows, not 2 averaged over widths)
    assert report.count("| map | 2 | 1 |") + report.count("| map | 4 | 1 |") == 2
    assert (tmp_path / "run" / "figures" / "laplace_kl_grid_map.png").is_file()
    assert (tmp_path / "run" / "figures" / "laplace_kl_vs_model_depth.png").is_file()


def _spread(tmp_path: Path, activation: str, refine_steps: int) -> pd.DataFrame:
    spec = {
        **SAVED,
        "model": specs.mlp(depth=2, width=4, activation=activation),
        "studies": [specs.study("laplace", refine_steps=refine_steps, refinements=4)],
    }
    out = tmp_path / activation
    assert run_spec(specs.load(tmp_path, spec), out, workers=1, progress=False).n_failed == 0
    return pd.read_csv(out / "results.csv")


def test_refinements_measure_how_far_the_mode_moves_the_kl(tmp_path: Path):
    # tanh: a smooth posterior with an exact mode; jittered starts refine to it, and the
    # KL's spread over the 4 refinements is rounding. L-BFGS stops by its own tolerance
    # (359 iterations on the 2-core dev machine), not by the cap of 1000, and ||g|| / lambda_min(H)
    # bounds the distance to the exact mode of a locally quadratic u: 7e-7 measured (the
    # loss's float64 rounding ends L-BFGS there; a cap of 300 stopped it at 5e-6 and a bound
    # of 1e-6 on ||g|| alone failed CI once)
    smooth = _spread(tmp_path, "tanh", 1000).iloc[0]
    assert smooth["laplace_refine_iters"] < 1000
    assert smooth["laplace_grad_norm"] / smooth["laplace_min_eig"] < 1e-5
    assert smooth["laplace_kl_refine_rel_sd"] < 1e-6
    assert smooth["laplace_kl_refine_mean"] == pytest.approx(smooth["laplace_kl"], rel=1e-6)
    # ReLU: no exact mode, so the refinements end at different points and KLs
    relu = _spread(tmp_path, "relu", 50).iloc[0]
    assert "KL sd over refinements" in (tmp_path / "relu" / "report.md").read_text()
    assert relu["laplace_kl_refine_rel_sd"] > 1e-4
    assert np.isfinite(relu[["laplace_kl_refine_sd", "laplace_w2_refine_sd"]].astype(float)).all()
    # the headline stays the unjittered start's: the same as a run without refinements
    plain = {**SAVED, "model": specs.mlp(depth=2, width=4, activation="relu")}
    plain["studies"] = [specs.study("laplace", refine_steps=50)]
    assert run_spec(specs.load(tmp_path, plain), tmp_path / "plain", workers=1).n_failed == 0
    one = pd.read_csv(tmp_path / "plain" / "results.csv").iloc[0]
    assert one["laplace_kl"] == relu["laplace_kl"] and "laplace_kl_refine_sd" not in one
