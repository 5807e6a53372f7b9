"""A sampled cell's superchains, nested R-hat and grade, end to end on a conjugate target.

Bayesian linear regression (an MLP of depth 0, Gaussian likelihood of known noise, N(0, 1)
prior on weights and bias) has the closed-form posterior N(mu, S), S = (A'A / s^2 + I)^-1,
mu = S A'y / s^2 with A = [x, 1]. ChEES runs 16 chains in 4 superchains, each from its own
MF-VI fit (``init_fits: 4``): the cell records the nested R-hat that arviz-stats gives on its
stored draws, its draws' means sit within Monte Carlo error of mu, and it is graded gold.
"""

from __future__ import annotations

import io

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

from tests import specs
from zoo.execution.cell import CellOutput, run_cell
from zoo.execution.runner import spec_runtime
from zoo.inference.sampling import SampledPosterior, superchains

NOISE, CHAINS, FITS = 0.3, 16, 4


@pytest.fixture(scope="module")
def linear_cell(tmp_path_factory) -> CellOutput:
    spec = specs.load(
        tmp_path_factory.mktemp("grade"),
        name="linear",
        seed=0,
        data=specs.teacher(n_train=40, n_test=20, in_dim=2, width=3, noise=NOISE),
        model=specs.mlp(depth=0),
        prior=specs.section("normal", scale=1.0),
        likelihood=specs.section("gaussian", noise=NOISE),
        inference=[
            specs.svi("mfvi", steps=200, lr=0.05, predictive_samples=5),
            specs.chees(
                init_from="mfvi",
                init_fits=FITS,
                warmup=150,
                draws=200,
                chains=CHAINS,
                keep_draws=200,
                max_leapfrog=64,
                predictive_draws=50,
            ),
        ],
    )
    (cell,) = [c for c in spec.cells() if c.method.kind == "chees"]
    return run_cell(cell, spec_runtime(spec, "cpu"))


def _tree(out: CellOutput) -> xr.DataTree:
    return xr.open_datatree(io.BytesIO(out.artifacts[".nc"]), engine="h5netcdf").load()


def test_recorded_nested_r_hat_is_arviz_stats_on_the_stored_draws(linear_cell) -> None:
    m = linear_cell.metrics
    assert m["superchains"] == FITS
    ids = np.repeat(np.arange(FITS), CHAINS // FITS).tolist()
    # the stored float32 draws, in float64 as the cell computed it (float32 arithmetic in
    # arviz-stats differs in the 6th digit)
    draws = _tree(linear_cell)["posterior"].to_dataset().astype("float64")
    nested = azs.rhat_nested(draws, superchain_ids=ids, method="rank")
    expected = max(float(nested[v].max()) for v in nested.data_vars)
    assert m["rhat_nested"] == pytest.approx(expected, rel=1e-9)


def test_a_regression_cells_prediction_gates_read_the_networks_output(linear_cell) -> None:
    # a regression has no class probabilities: its prediction diagnostics are those of the
    # mean of y at each test point, here x_test w + b of every stored draw
    dt = _tree(linear_cell)
    x = dt["predictions_constant_data"]["x"].values.astype(float)
    post = dt["posterior"].to_dataset().astype("float64")
    w = post["layer0.weight"].values.reshape(CHAINS, -1, 2)
    b = post["layer0.bias"].values.reshape(CHAINS, -1, 1)
    f = np.einsum("cdk,nk->cdn", w, x) + b  # (chain, draw, point)
    ids = np.repeat(np.arange(FITS), CHAINS // FITS).tolist()
    fx = xr.Dataset({"f": (("chain", "draw", "point"), f)})
    rhat = azs.rhat(fx, method="rank")["f"].values
    nested = azs.rhat_nested(fx, superchain_ids=ids, method="rank")["f"].values
    m = linear_cell.metrics
    assert m["max_r_hat_pred"] == pytest.approx(rhat.max(), rel=1e-5)
    assert m["rhat_nested_pred"] == pytest.approx(nested.max(), rel=1e-5)
    assert m["min_ess_bulk_pred"] >= 400  # so the bronze gates apply and pass


def test_a_converged_conjugate_regression_is_graded_gold(linear_cell) -> None:
    dt = _tree(linear_cell)
    x = dt["constant_data"]["x"].values.astype(float)
    y = dt["observed_data"]["y"].values.astype(float)
    a = np.column_stack([x, np.ones(len(x))])
    cov = np.linalg.inv(a.T @ a / NOISE**2 + np.eye(a.shape[1]))
    mu = cov @ a.T @ y / NOISE**2
    post = dt["posterior"]
    draws = np.concatenate(
        [
            post["layer0.weight"].values.reshape(CHAINS, -1, 2),
            post["layer0.bias"].values.reshape(CHAINS, -1, 1),
        ],
        -1,
    ).astype(float)
    m = linear_cell.metrics
    # within 4 Monte Carlo standard errors sd / sqrt(ESS), at the cell's smallest bulk ESS
    se = np.sqrt(np.diag(cov) / m["min_ess_bulk"])
    assert np.all(np.abs(draws.mean((0, 1)) - mu) < 4 * se)
    assert m["max_r_hat"] <= 1.01 and m["rhat_nested"] <= 1.01
    assert m["min_ess_bulk"] >= 400 and m["divergent_frac"] == 0.0
    assert m["reference_grade"] == "gold" and m["grade_failed"] == ""


def test_superchains_are_the_init_fits_blocks_and_follow_a_subset_of_chains() -> None:
    assert superchains(10, 3) == (0, 0, 0, 0, 1, 1, 1, 2, 2, 2)  # group_sizes' blocks
    assert superchains(8, 1) is None  # one start: one superchain
    post = SampledPosterior({"w": np.zeros((10, 5, 2))}, superchain_ids=superchains(10, 3))
    sub = post.subset(np.array([0, 4, 9]))
    assert sub.chains == 3 and sub.superchain_ids == (0, 1, 2)
    assert SampledPosterior({"w": np.zeros((4, 5))}).subset(np.array([1])).superchain_ids is None
