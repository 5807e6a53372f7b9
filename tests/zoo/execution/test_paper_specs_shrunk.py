"""The paper experiments' specs run end to end, cut to seconds (the full runs are measured
once and recorded in each spec's header and docs/results/; CI runs these shrunk copies).

Each case is the shipped spec with ``--set`` overrides that keep its structure (methods,
studies, the swept axes that the report reads) and cut sizes: fewer cells, steps, draws
and points. A cell that fails, or a study whose metrics are missing, fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from zoo.cli import main

SPECS = Path(__file__).parents[3] / "specs"
FASHION = "/usr/share/datasets/fashion-mnist"

#: spec -> (overrides, (metric columns every row of a method must have, by method))
CASES: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "two_moons_depth_fixed_width": (
        [
            "sweep.seed=[0]",
            "sweep.model.depth=[2]",
            "data.n_train=100",
            "data.n_test=50",
            "inference.mfvi.epochs=2",
            "inference.mfvi.pretrain_epochs=1",
            "inference.chees.warmup=20",
            "inference.chees.draws=20",
            "inference.chees.predictive_draws=10",
            "inference.chees.keep_draws=5",
            "studies.1.refine_steps=5",
            "studies.2.draws=20",
        ],
        {"chees": ["kl_diag_full", "kl_null", "reference_grade", "rhat_nested", "superchains"]},
    ),
    "overpruning_uci_hmc": (
        [
            "sweep.data.name=[boston]",
            "sweep.split=[0]",
            "inference.MF.steps=50",
            "inference.HMC.warmup=20",
            "inference.HMC.draws=10",
            "inference.HMC.max_draws=20",
            "inference.HMC.target_ess=100",
            "inference.HMC.max_leapfrog=64",
            "inference.HMC.keep_draws=5",
            "inference.HMC.predictive_draws=10",
        ],
        {"HMC": ["nll", "reference_grade", "max_r_hat_pred", "rhat_nested_pred"]},
    ),
    "two_moons_laplace_activation": (
        [
            "sweep.seed=[0]",
            "sweep.model.depth=[2]",
            "data.n_train=200",
            "data.n_test=50",
            "model.param_budget=60",
            "inference.map.epochs=2",
            "studies.0.refine_steps=5",
        ],
        {"map": ["laplace_kl", "laplace_kl_refine_rel_sd"]},
    ),
    "ktied_mlp_fashion_paper": (
        [
            "sweep.seed=[0]",
            "sweep.inference.k_tied.guide.rank=[2]",
            "data.validation=100",
            "data.n_train=300",
            "data.n_test=100",
            "model.width=20",
            *(
                f"inference.{m}.{f}"
                for m in ("mean_field", "k_tied")
                for f in ("epochs=3", "batch_size=50", "predictive_samples=5")
            ),
            *(
                f"studies.{i}.{f}"
                for i in (0, 1)
                for f in ("snr_steps=[6, 12]", "elbo_steps=[6, 12]", "elbo_draws=2")
            ),
            "studies.0.truncation_draws=5",
        ],
        {"mean_field": ["nll", "accuracy"], "k_tied": ["nll", "accuracy"]},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_paper_spec_runs_shrunk(name: str, tmp_path: Path) -> None:
    if name.startswith("ktied") and not os.path.isdir(FASHION):
        pytest.skip(f"Fashion-MNIST is not installed in {FASHION}")
    overrides, needed = CASES[name]
    out = tmp_path / "run"
    args = ["run", str(SPECS / f"{name}.yaml"), "--out", str(out), "--no-progress"]
    args += ["--workers", "1", *(a for s in overrides for a in ("--set", s))]
    assert main(args) == 0
    res = pd.read_csv(out / "results.csv")
    assert (res["status"] == "ok").all(), res[["cell_id", "error"]]
    for method, cols in needed.items():
        rows = res[res["method"] == method]
        assert len(rows) >= 1, method
        for col in cols:
            assert col in rows and rows[col].notna().all(), (method, col)
    assert (out / "report.md").is_file()
