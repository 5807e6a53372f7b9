"""A cell file as an ArviZ user opens it, on whichever ArviZ line is installed.

bnn-zoo supports two ArviZ lines (docs/install.md): arviz-base/arviz-stats 0.8.x on Python
3.11 and the 1.x line on Python 3.12+ (CI runs this file on both). A tiny NUTS run writes its
cell file; that file must open with ``xarray.open_datatree`` and arviz-base's
``convert_to_datatree`` (what ``arviz.from_netcdf`` does), and arviz-stats' ``loo``, ``ess``,
``rhat``, ``rhat_nested`` and ``summary`` must run on it and agree with the numbers the
run's results and report give.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import arviz_base as azb
import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

import zoo
from reports.diagnostics import posterior_summary
from reports.superchains import posterior_rhat_nested

SPEC = """\
name: arviz_lines
seed: 1
data: {kind: two_moons, n_train: 40, n_test: 30, noise: 0.1}
model: {kind: mlp, depth: 1, width: 3, activation: tanh}
inference:
  - {name: nuts, kind: nuts, warmup: 100, draws: 40, chains: 4, vectorize_chains: true,
     max_tree_depth: 4, predictive_draws: 5}
studies: []
"""
CHAINS, DRAWS, N_TRAIN = 4, 40, 40


@pytest.fixture(scope="module")
def cell_file(tmp_path_factory) -> tuple[Path, dict]:
    root = Path(tmp_path_factory.mktemp("arviz_lines"))
    (root / "s.yaml").write_text(SPEC)
    run = zoo.run(root / "s.yaml", out=root / "run", workers=1)
    assert run.outcome.n_failed == 0
    (cell,) = run.cells
    (row,) = run.results.to_dict("records")
    return run.dir / "cells" / f"{cell.cell_id}.nc", row


def _values(stat: xr.Dataset | xr.DataTree) -> np.ndarray:
    """All parameters' values of a per-variable statistic (a Dataset, or the 1.x DataTree)."""
    ds = stat.to_dataset() if isinstance(stat, xr.DataTree) else stat
    return np.concatenate([np.ravel(v.values) for v in ds.data_vars.values()])


def test_the_cell_file_opens_as_arviz_users_open_it(cell_file) -> None:
    path, _ = cell_file
    with xr.open_datatree(path) as dt:  # no engine named: xarray picks it from the file
        assert dict(dt["posterior"].sizes)["chain"] == CHAINS
        assert dt["log_likelihood"]["y"].shape == (CHAINS, DRAWS, N_TRAIN)
    dt = azb.convert_to_datatree(str(path))  # what arviz.from_netcdf does with a path
    assert {"posterior", "log_likelihood", "sample_stats", "observed_data"} <= set(dt.children)
    stats = dt["sample_stats"]
    # the cap cut the trajectory: the flag 1.x's diagnose reads, on both lines
    reached = stats["reached_max_treedepth"].values
    assert reached.dtype == bool
    np.testing.assert_array_equal(reached, stats["tree_depth"].values >= 4)


def test_arviz_stats_reads_the_cell_file_as_the_report_does(cell_file) -> None:
    path, row = cell_file
    dt = azb.convert_to_datatree(str(path))
    ess = _values(azs.ess(dt, method="bulk"))
    rhat = _values(azs.rhat(dt))
    ours = posterior_summary(dt)
    assert ess.size == rhat.size == len(ours) == row["n_params"]
    # the same numbers as the report's table and the run's results (order aside)
    np.testing.assert_allclose(np.sort(ess), np.sort(ours["ess_bulk"].to_numpy()), rtol=1e-12)
    np.testing.assert_allclose(np.sort(rhat), np.sort(ours["r_hat"].to_numpy()), rtol=1e-12)
    assert rhat.max() == pytest.approx(row["max_r_hat"], rel=1e-9)
    assert ess.min() == pytest.approx(row["min_ess_bulk"], rel=1e-9)

    ids = [0, 0, 1, 1]  # the user's grouping of the four chains into two superchains
    nested = _values(azs.rhat_nested(dt, superchain_ids=ids))
    assert nested.size == ess.size and np.isfinite(nested).all()
    # the report's helper casts the stored float32 draws to float64 first
    assert nested.max() == pytest.approx(posterior_rhat_nested(dt, ids), rel=1e-6)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pareto k of 160 draws of a tiny fit
        loo = azs.loo(dt, pointwise=True)
    assert loo.n_data_points == N_TRAIN and loo.n_samples == CHAINS * DRAWS
    assert np.isfinite(loo.elpd) and loo.elpd < 0
    assert np.asarray(loo.pareto_k).shape == (N_TRAIN,)

    table = azs.summary(dt, kind="diagnostics")
    assert len(table) == row["n_params"] and not table.isna().any().any()


def test_arviz_1x_diagnose_reads_the_cell_file(cell_file) -> None:
    if not hasattr(azs, "diagnose"):
        pytest.skip("arviz-stats 0.8.x (Python 3.11) has no diagnose; CI runs this on 3.12")
    path, row = cell_file
    dt = azb.convert_to_datatree(str(path))
    _, found = azs.diagnose(dt, show_diagnostics=False, return_diagnostics=True)
    assert found["divergent"]["n_divergent"] == row["n_divergent"]
    assert found["divergent"]["total_samples"] == CHAINS * DRAWS
    assert found["treedepth"]["n_max"] == row["n_max_tree_depth"]
    assert len(found["bfmi"]["bfmi_values"]) == CHAINS  # E-BFMI from the stored energy
    assert {"ess", "rhat"} <= set(found)
