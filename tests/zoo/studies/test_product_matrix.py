"""End to end: the product-matrix simulation spec and trained deep linear BNNs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.product_matrix import off_diagonal_mass, simulate
from tests import specs
from zoo.cli import main
from zoo.spec.load import SpecError, load_spec

SIM = specs.simulation("product_matrix", "sim", seed=3, width=3, depths=[1, 2, 3], n_draws=4000)


def test_simulation_spec_runs_and_matches_exact(tmp_path: Path) -> None:
    spec = specs.write_spec(tmp_path, SIM, file="sim.yaml")
    out = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(out), "--no-progress"]) == 0
    res = pd.read_csv(out / "results.csv")
    assert list(res["depth"]) == [1, 2, 3]
    # structural support: diagonal, shared rows/columns, everything (K = 3: 9 entries)
    np.testing.assert_allclose(res["structural_support"], [9 / 81, (3 + 3 - 1) * 9 / 81, 1.0])
    assert res.loc[0, "off_diagonal_mass_exact"] == 0.0
    assert (res["off_diagonal_mass_exact"].iloc[1:] > 0).all()
    with np.load(out / "covariances.npz") as f:
        assert f["depth_2"].shape == (9, 9)
    assert (out / "figures" / "product_covariance.png").is_file()
    report = (out / "report.md").read_text()
    assert "Product-matrix covariance by depth" in report
    # the report states the exact correlations beside the deepest Monte Carlo estimate
    exact_max, mc_deep = res["max_abs_correlation_exact"].max(), res["max_abs_correlation"].iloc[-1]
    assert f"at most {exact_max:.1%} at every depth" in report
    assert f"at L = 3 reaches {mc_deep:.0%}" in report
    # the exact column is the library's exact covariance of the same seeded layers
    exact = simulate(3, [2, 3], method="exact", seed=3)
    np.testing.assert_allclose(
        res["off_diagonal_mass_exact"].iloc[1:],
        [off_diagonal_mass(exact[2]), off_diagonal_mass(exact[3])],
    )


def test_simulation_spec_rejects_data_and_bad_depths(tmp_path: Path) -> None:
    spec = specs.write_spec(tmp_path, {**SIM, "data": specs.two_moons()}, file="bad.yaml")
    with pytest.raises(SpecError, match="simulation spec has no data"):
        load_spec(spec)
    specs.write_spec(spec, {**SIM, "simulation": {**SIM["simulation"], "depths": [0, 2]}})
    with pytest.raises(
        SpecError, match=r"simulation.depths: depths must lie in 1\.\.1000, got \[0, 2\]"
    ):
        load_spec(spec)
    specs.write_spec(spec, name="nothing", data=None, model=None, inference=None)
    with pytest.raises(SpecError, match="data, model, inference: required"):
        load_spec(spec)


def test_trained_deep_linear_network_stores_its_product_covariance(
    tiny_spec: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    args = [
        "run",
        str(tiny_spec),
        "--out",
        str(out),
        "--no-progress",
        "--workers",
        "1",
        "--set",
        "model.activation=linear",
        "--set",
        "sweep.seed=[0]",
        "--set",
        "studies=[{kind: product_matrix, draws: 300}]",
    ]
    assert main(args) == 0
    res = pd.read_csv(out / "results.csv")
    assert res["product_offdiag_mass"].between(0, 1).all()
    for cell_id in res["cell_id"]:
        with np.load(out / "cells" / f"{cell_id}.product_cov.npz") as f:
            cov = f["cov"]
        assert cov.shape == (2 * 2, 2 * 2)  # two moons: 2 inputs, 2 classes
        np.testing.assert_allclose(cov, cov.T, atol=1e-6)
        assert np.all(np.linalg.eigvalsh(cov.astype(np.float64)) > -1e-6)
    assert (out / "figures" / "product_covariance_trained.png").is_file()
    assert "over 300 draws" in (out / "report.md").read_text()
