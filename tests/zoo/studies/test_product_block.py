"""A block of the product-matrix covariance (Farquhar et al.'s Fig. 1 on real data): the exact block,
its agreement with Monte Carlo, the study's ``block`` and ``method`` options end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.product_block import (
    block_agreement,
    block_layers,
    block_product_of_draws,
    exact_block_covariance,
)
from reports.product_matrix import (
    exact_product_covariance,
    random_layers_for_sizes,
    sample_layers,
)
from tests.zoo.spec._helpers import write as _write
from zoo.cli import main
from zoo.spec import load_spec
from zoo.spec.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("sizes", [[6, 4], [6, 3, 4], [6, 3, 5, 4], [5, 2, 3, 2, 4]])
def test_exact_block_is_the_block_of_the_full_exact_covariance(sizes: list[int]) -> None:
    layers = random_layers_for_sizes(sizes, seed=1, mean_low=-0.8, mean_high=0.8, std=0.4)
    n_in, n_out = sizes[0], sizes[-1]
    rows, cols = [3, 0], [4, 1, 2]
    full = exact_product_covariance(layers).reshape(n_out, n_in, n_out, n_in)
    want = full[np.ix_(rows, cols, rows, cols)].reshape(6, 6)
    np.testing.assert_allclose(exact_block_covariance(layers, rows, cols), want, atol=1e-12)
    # the cut layers' product is the block of the product, draw by draw
    draws = sample_layers(layers, 3, seed=0)
    prod = block_product_of_draws(draws, rows, cols)
    full_prod = block_product_of_draws(draws, range(n_out), range(n_in))
    np.testing.assert_allclose(prod, full_prod[:, rows][:, :, cols])
    assert [m.shape for m, _ in block_layers(layers, rows, cols)][0][1] == 3


def test_block_indices_outside_the_matrix_are_named() -> None:
    layers = random_layers_for_sizes([4, 3, 2], seed=0)
    with pytest.raises(ValueError, match=r"block.inputs: indices must lie in 0..3 .* got \[4\]"):
        exact_block_covariance(layers, [0], [1, 4])
    with pytest.raises(ValueError, match=r"block.outputs: indices must lie in 0..1"):
        exact_block_covariance(layers, [2], [1])


def test_monte_carlo_agrees_with_exact_within_its_standard_error() -> None:
    layers = random_layers_for_sizes([7, 4, 4, 3], seed=2, mean_low=-0.6, mean_high=0.6, std=0.5)
    rows, cols = [0, 2], [1, 3, 5, 6]
    exact = exact_block_covariance(layers, rows, cols)
    samples = block_product_of_draws(sample_layers(layers, 20_000, seed=5), rows, cols)
    cov, agree = block_agreement(samples.reshape(20_000, -1), exact)
    assert agree.max_z < 4.5  # 64 entries: max |z| about 2.9 under the null
    assert agree.share_within_3se >= 0.95
    assert abs(agree.offdiag_mass_mc - agree.offdiag_mass_exact) < 0.05
    # a wrong "exact" (diagonal only) is far outside the error: the check can fail
    _, wrong = block_agreement(samples.reshape(20_000, -1), np.diag(np.diag(exact)))
    assert wrong.max_z > 10
    assert cov.shape == (8, 8)


BASE = """\
name: t
data: {kind: two_moons, n_train: 50}
model: {kind: mlp, depth: 1, width: 4, activation: linear}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 5}
"""


def test_block_and_method_options_validate(tmp_path: Path) -> None:
    ok = BASE + (
        "studies:\n  - {kind: product_matrix, draws: 50, method: both, block: "
        "{outputs: [1], inputs: {rows: [1, 3], cols: [0, 2], width: 4}}}\n"
    )
    study = load_spec(_write(tmp_path, ok)).studies[0]
    assert study.method == "both" and study.block.input_indices() == [4, 5, 8, 9]
    bad_patch = ok.replace("cols: [0, 2], width: 4", "cols: [0, 5], width: 4")
    with pytest.raises(SpecError, match="cols end 5 exceeds the image width 4"):
        load_spec(_write(tmp_path, bad_patch))
    repeated = ok.replace("outputs: [1]", "outputs: [1, 1]")
    with pytest.raises(SpecError, match="outputs must be distinct indices"):
        load_spec(_write(tmp_path, repeated))
    k_tied = ok.replace("guide: {kind: mean_field}", "guide: {kind: k_tied, rank: 1}")
    with pytest.raises(SpecError, match="needs independent Gaussian layers"):
        load_spec(_write(tmp_path, k_tied))
    mc_ok = k_tied.replace("method: both", "method: mc")
    assert load_spec(_write(tmp_path, mc_ok)).studies[0].method == "mc"


def test_shipped_fashion_spec_cut_to_digits_runs_with_method_both(tmp_path: Path) -> None:
    out = tmp_path / "run"
    block = "{outputs: [0, 1], inputs: {rows: [3, 5], cols: [3, 6], width: 8}}"
    sets = [
        "data={kind: digits, test_fraction: 0.2}",
        "model.width=12",
        "sweep={model.depth: [2]}",
        "inference.0.epochs=1",
        "inference.0.pretrain_epochs=0",
        "inference.0.predictive_samples=5",
        f"studies=[{{kind: product_matrix, draws: 400, method: both, block: {block}}}]",
    ]
    args = ["run", str(ROOT / "specs" / "deep_linear_fashion.yaml"), "--out", str(out)]
    args += ["--no-progress", "--workers", "1"] + [a for s in sets for a in ("--set", s)]
    assert main(args) == 0
    res = pd.read_csv(out / "results.csv")
    assert res["status"].tolist() == ["ok"]
    r = res.iloc[0]
    assert 0 < r["product_offdiag_mass_exact"] < 1 and 0 < r["product_offdiag_mass"] < 1
    assert r["product_cov_max_z"] > 0 and 0 < r["product_cov_within_3se"] <= 1
    with np.load(out / "cells" / f"{r['cell_id']}.product_cov.npz") as f:
        assert f["cov"].shape == f["cov_exact"].shape == (12, 12)
        assert f["shape"].tolist() == [2, 6]
    report = (out / "report.md").read_text()
    assert "outputs [0, 1] x 6 inputs" in report and "max_z" in report
    assert (out / "figures" / "product_covariance_trained.png").is_file()
