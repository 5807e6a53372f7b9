"""Posterior moments, trajectories and the pruning report of a small UCI run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyro
import pytest
import torch

from zoo.cli import main
from zoo.inference import NO_HOOKS, Hooks, fit
from zoo.run.cell import run_cell
from zoo.runtime import Runtime
from zoo.spec.load import load_spec
from zoo.studies.pruning.probe import PruningProbe, draw_moments, guide_moments

SPEC = """\
name: prune_tiny
data: {kind: uci, name: boston}
model: {kind: mlp, depth: DEPTH, width: 8, activation: tanh}
likelihood: {kind: gaussian, noise: learned}
inference:
  - {name: ES, kind: mle, steps: 30, lr: 0.005, betas: [0.9, 0.99]}
  - {name: MF, kind: svi, guide: {kind: mean_field, init_scale: 0.0001}, steps: 40,
     lr: 0.005, betas: [0.9, 0.99], predictive_samples: 10}
  - {name: GD, kind: svi, guide: {kind: fixed_variance, scale: 0.05}, steps: 40,
     lr: 0.005, predictive_samples: 10}
  - {name: FC, kind: svi, guide: {kind: full_rank, init_scale: 0.0001}, steps: 40,
     lr: 0.005, predictive_samples: 10}
sweep: {split: [0, 1]}
metrics: {names: [nll, rmse]}
studies: [{kind: pruning, trajectory_every: 10, draws: 5, trajectory_draws: 4}]
report: {x: method, hue: method, figures: [nll]}
"""


def _spec(tmp_path: Path, depth: int = 1) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.replace("DEPTH", str(depth)))
    return p


def _cell(spec, method: str):
    return next(c for c in spec.cells() if c.method.name == method)


def _fit(ctx, hooks: Hooks = NO_HOOKS):
    return fit(ctx.cell.method, ctx.model, ctx.data, seed=ctx.cell.spec.seed,
               runtime=ctx.runtime, hooks=hooks)  # fmt: skip


def test_guide_moments_are_the_guide_parameters(tmp_path: Path, cell_context) -> None:
    spec = load_spec(_spec(tmp_path))
    ctx = cell_context(_cell(spec, "MF"))
    model = ctx.model
    mf = _fit(ctx).posterior.guide
    mom = guide_moments(mf, model)
    np.testing.assert_allclose(mom["layer0.weight"][0], mf.locs.layer0.weight.detach().numpy())
    np.testing.assert_allclose(mom["layer1.bias"][1], mf.scales.layer1.bias.detach().numpy())
    fc = _fit(cell_context(_cell(spec, "FC"))).posterior.guide
    q = fc.get_posterior("layer0.weight")
    np.testing.assert_allclose(mom_fc := guide_moments(fc, model)["layer0.weight"][1],
                               q.variance.detach().sqrt().numpy(), rtol=1e-5)  # fmt: skip
    assert mom_fc.shape == (8, 13)
    draws = {k: torch.randn(4000, *v[0].shape) * 2 + 1 for k, v in mom.items()}
    dm = draw_moments(draws, model)
    assert np.abs(dm["layer0.weight"][0] - 1).max() < 0.15
    assert np.abs(dm["layer0.weight"][1] - 2).max() < 0.15


def test_trajectories_leave_the_fit_unchanged(tmp_path: Path, cell_context) -> None:
    spec = load_spec(_spec(tmp_path))
    cell = _cell(spec, "MF")
    pyro.clear_param_store()
    a = _fit(cell_context(cell))
    pyro.clear_param_store()
    ctx = cell_context(cell)
    probe = PruningProbe(cell.studies[0], ctx)
    b = _fit(ctx, probe.hooks)
    np.testing.assert_array_equal(a.losses, b.losses)
    t = probe.trajectory.arrays()
    np.testing.assert_array_equal(t["step"], [1, 10, 20, 30, 40])
    assert np.all(t["kl"] > 0) and np.all(np.isfinite(t["nll_test"]))
    np.testing.assert_allclose(t["neg_elbo"], t["exp_nll_train"] + t["kl"])
    assert t["kl"][-1] < t["kl"][0]  # init_scale 1e-4: a large KL that falls
    metrics, files = probe.finish(b)
    assert 0.0 <= metrics["pruned_frac"] <= 1.0 and set(files) == {".pruning.npz"}


def test_report_has_pruning_table_and_table1(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", str(_spec(tmp_path)), "--out", str(out), "--no-progress",
                 "--workers", "1"]) == 0  # fmt: skip
    res = pd.read_csv(out / "results.csv")
    assert list(res.columns[:3]) == ["method", "seed", "split"]
    assert sorted(res["split"].unique()) == [0, 1]
    assert res.loc[res["method"] == "GD", "pruned_frac"].eq(0).all()
    assert res.loc[res["method"] == "ES", "pruned_frac"].isna().all()
    summ = pd.read_csv(out / "summary.csv")
    assert "split" not in summ.columns and (summ["n"] == 2).all()  # over splits
    for cell in res["cell_id"][res["method"] != "ES"]:
        assert (out / "cells" / f"{cell}.pruning.npz").is_file()
    md = (out / "report.md").read_text()
    assert "Over-pruning: pruned hidden units" in md and "Table 1 (quoted)" in md
    assert "MF: -2.62 ± 0.06" in md and "(HMC, not run)" in md
    for stem in ("pruning_units_layer0", "pruning_trajectories", "pruning_unit_posteriors_MF"):
        assert (out / "figures" / f"{stem}.png").is_file()


@pytest.mark.slow
def test_deeper_networks_report_pruning_per_layer(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", str(_spec(tmp_path, depth=2)), "--out", str(out), "--no-progress",
                 "--workers", "1", "--set", "sweep.split=[0]"]) == 0  # fmt: skip
    res = pd.read_csv(out / "results.csv")
    assert {"pruned_frac.layer0", "pruned_frac.layer1"} <= set(res.columns)
    assert "pruned layer1" in (out / "report.md").read_text()


@pytest.mark.slow
def test_default_spec_mf_prunes_most_units_gd_none() -> None:
    """The done-when result on split 0 of the shipped default spec (full 5000 steps)."""
    spec = load_spec(Path(__file__).resolve().parents[3] / "specs" / "overpruning_uci.yaml")
    cells = {c.axes["method"]: c for c in spec.cells() if c.axes["split"] == 0}
    mf = run_cell(cells["MF"], Runtime.cpu()).metrics
    gd = run_cell(cells["GD"], Runtime.cpu()).metrics
    assert mf["pruned_frac"] > 0.5 and mf["in_at_prior_frac"] > 0.5
    assert gd["pruned_frac"] == 0.0
    assert mf["nll"] < 3.2 and gd["nll"] < 3.2  # sensible fits in original units


def test_sampler_cells_get_pruning_statistics_from_draws(tmp_path: Path) -> None:
    p = tmp_path / "n.yaml"
    p.write_text("""\
name: n
data: {kind: teacher, n_train: 20, n_test: 20, width: 3, seed: 1}
model: {kind: mlp, depth: 1, width: 3, activation: tanh}
likelihood: {kind: gaussian, noise: 0.1}
inference: [{name: NUTS, kind: nuts, warmup: 15, draws: 15, max_tree_depth: 4}]
studies: [{kind: pruning, draws: 10}]
""")
    out = run_cell(load_spec(p).cells()[0], Runtime.cpu())
    assert 0.0 <= out.metrics["pruned_frac"] <= 1.0
    assert ".pruning.npz" in out.artifacts and ".nc" in out.artifacts
    assert "kl_diag_full" not in out.metrics  # no price-of-mean-field study in this spec
