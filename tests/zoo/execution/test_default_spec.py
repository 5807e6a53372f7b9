"""The default spec end to end (slow), cut to two depths and one seed with a short chain.

The full run (`zoo run specs/two_moons_depth.yaml`, the README's first command) takes longer
than a test should; its measured results are in docs/results/default.md. Here the
same spec runs with its sampler shortened, and the run directory is checked for what the
report promises: every cell ok, MF-VI accurate at every depth, one logit (Bernoulli), the
KL with its null and excess and the Wasserstein columns, the Laplace KL of the MF-VI cells,
the predictive TV and agreement of the NUTS cells in and out of distribution, ArviZ files
that open, and the figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from zoo.cli import main
from zoo.spec.load import load_spec

SPEC = Path(__file__).resolve().parents[3] / "specs" / "two_moons_depth.yaml"


@pytest.mark.slow
def test_default_spec_end_to_end_with_a_short_chain(tmp_path: Path) -> None:
    spec = load_spec(SPEC)
    sampler = next(m for m in spec.inference if m.kind in ("nuts", "hmc"))
    assert sampler.init_from == "mfvi"
    study = next(i for i, s in enumerate(spec.studies) if s.kind == "price_of_mean_field")
    out = tmp_path / "run"
    depths = [min(spec.sweep["model.depth"]), max(spec.sweep["model.depth"])]
    args = [
        "run",
        str(SPEC),
        "--out",
        str(out),
        "--no-progress",
        "--set",
        f"sweep.model.depth={depths}",
        "--set",
        "sweep.seed=[0]",
        "--set",
        f"inference.{sampler.name}.warmup=60",
        "--set",
        f"inference.{sampler.name}.draws=60",
        "--set",
        f"studies.{study}.max_draws=120",
    ]
    assert main(args) == 0
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 4 and (res["status"] == "ok").all()
    assert (res["n_params"] <= spec.model.param_budget).all()
    # one logit: the budget buys width 24 at depth 1 (19 with a 2-logit softmax)
    assert spec.likelihood.kind == "bernoulli"
    assert (res.loc[res["model.depth"] == 1, "width"] == 24).all()
    mfvi = res[res["method"] == "mfvi"]
    assert (mfvi["accuracy"] >= 0.95).all()
    assert (mfvi["laplace_kl"] > 0).all() and (mfvi["laplace_min_eig"] > 0).all()
    sampled = res[res["method"] == sampler.name]
    assert (sampled["kl_diag_full"] > 0).all() and np.isfinite(sampled["w_error"]).all()
    assert np.isfinite(sampled["w_excess"]).all() and sampled["kl_diag_full.layer0"].notna().all()
    # no output pairs to carry a softmax's shift invariance
    assert "kl_output_columns" not in res.columns or res["kl_output_columns"].isna().all()
    for q in ("qdiag", "qfull", "mfvi"):
        for sfx in ("", "_ood"):
            assert sampled[f"pred_tv_{q}{sfx}"].between(0, 1).all(), (q, sfx)
            assert sampled[f"pred_agree_{q}{sfx}"].between(0, 1).all(), (q, sfx)
    assert (sampled["pred_ood_kind"] == "far").all()
    assert np.allclose(sampled["kl_excess"], sampled["kl_diag_full"] - sampled["kl_null"])
    assert (sampled["kl_null"] > 0).all() and (sampled["kl_null_sd"] >= 0).all()
    # The stopping rule ran: between draws and max_draws per chain, worth fewer independent
    # draws to the covariance than were drawn.
    assert sampled["draws_per_chain"].between(60, 120).all()
    n_drawn = sampled["draws_per_chain"] * sampler.chains
    assert ((sampled["kl_null_draws"] > 0) & (sampled["kl_null_draws"] < n_drawn)).all()
    for cell_id in res["cell_id"]:
        dt = xr.open_datatree(out / "cells" / f"{cell_id}.nc")
        assert {
            "posterior",
            "log_likelihood",
            "posterior_predictive",
            "predictions",
            "log_likelihood_test",
        } <= set(dt.children)
        dt.close()
    for fig in spec.report.figures:
        assert (out / "figures" / f"{fig}_vs_model_depth.png").is_file(), fig
    report = (out / "report.md").read_text()
    assert "The price of mean field" in report
    assert "The price of mean field at a mode (Laplace)" in report
    assert "The price of mean field in predictions" in report
    for fig in ("kl_null", "laplace_kl", "predictive_tv"):
        assert (out / "figures" / f"{fig}.png").is_file(), fig
