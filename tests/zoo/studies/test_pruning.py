"""Posterior moments, trajectories and the pruning report of a small UCI run."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyro
import pytest
import torch

from reports.pruning import effective_units
from tests import specs
from tests.conftest import SPECS
from zoo.cli import main
from zoo.data.teacher import teacher_params
from zoo.execution.cell import run_cell
from zoo.execution.store import RunDir
from zoo.inference import NO_HOOKS, Hooks, fit
from zoo.runtime import Runtime
from zoo.spec.load import load_spec
from zoo.studies.pruning.nulls import functional_nulls, prior_draws, shuffled_units_eff
from zoo.studies.pruning.probe import (
    PruningProbe,
    draw_moments,
    functional_outputs,
    guide_moments,
)
from zoo.studies.pruning.report import pruning_sections

ADAM = {"lr": 0.005, "betas": [0.9, 0.99]}
SPEC = specs.spec(
    "prune_tiny",
    data=specs.uci("boston"),
    model=specs.mlp(depth=1, width=8, activation="tanh"),
    likelihood=specs.section("gaussian", noise="learned"),
    inference=[
        specs.method("ES", "mle", steps=30, **ADAM),
        specs.method("MAP", "map", steps=30, **ADAM),
        specs.svi(
            "MF",
            guide={"kind": "mean_field", "init_scale": 0.0001},
            steps=40,
            **ADAM,
            predictive_samples=10,
        ),
        specs.svi(
            "GD",
            guide={"kind": "fixed_variance", "scale": 0.05, "local_reparam": True},
            steps=40,
            lr=0.005,
            predictive_samples=10,
        ),
        specs.svi(
            "FC",
            guide={"kind": "full_rank", "init_scale": 0.0001},
            steps=40,
            lr=0.005,
            predictive_samples=10,
        ),
    ],
    sweep={"split": [0, 1]},
    metrics={"names": ["nll", "rmse"]},
    studies=[specs.study("pruning", trajectory_every=10, draws=5, trajectory_draws=4)],
    report={"x": "method", "hue": "method", "figures": ["nll"]},
)


def _cell(spec, method: str):
    return next(c for c in spec.cells() if c.method.name == method)


def _fit(ctx, hooks: Hooks = NO_HOOKS):
    return fit(
        ctx.cell.method,
        ctx.model,
        ctx.data,
        seed=ctx.cell.spec.seed,
        runtime=ctx.runtime,
        hooks=hooks,
    )


def test_guide_moments_are_the_guide_parameters(tmp_path: Path, cell_context) -> None:
    spec = specs.load(tmp_path, SPEC)
    ctx = cell_context(_cell(spec, "MF"))
    model = ctx.model
    mf = _fit(ctx).posterior.guide
    mom = guide_moments(mf, model)
    np.testing.assert_allclose(mom["layer0.weight"][0], mf.locs.layer0.weight.detach().numpy())
    np.testing.assert_allclose(mom["layer1.bias"][1], mf.scales.layer1.bias.detach().numpy())
    fc = _fit(cell_context(_cell(spec, "FC"))).posterior.guide
    q = fc.get_posterior("layer0.weight")
    np.testing.assert_allclose(
        mom_fc := guide_moments(fc, model)["layer0.weight"][1],
        q.variance.detach().sqrt().numpy(),
        rtol=1e-5,
    )
    assert mom_fc.shape == (8, 13)
    draws = {k: torch.randn(4000, *v[0].shape) * 2 + 1 for k, v in mom.items()}
    dm = draw_moments(draws, model)
    assert np.abs(dm["layer0.weight"][0] - 1).max() < 0.15
    assert np.abs(dm["layer0.weight"][1] - 2).max() < 0.15


def test_trajectories_leave_the_fit_unchanged(tmp_path: Path, cell_context) -> None:
    spec = specs.load(tmp_path, SPEC)
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


EFFECTIVE = "Over-pruning: effective number of units (rule-free)"


class _OldRun:
    """A run stored before the functional measure: npz files without the variance shares."""

    def __init__(self, root: Path) -> None:
        self.run = RunDir(root)

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        data = self.run.read_artifact(cell_id, suffix)
        if data is None:
            return None
        with np.load(io.BytesIO(data)) as z:
            keep = {k: z[k] for k in z.files if ".var_" not in k}
        buf = io.BytesIO()
        np.savez(buf, **keep)
        return buf.getvalue()


class _WithPoint:
    """A run whose point-estimate cells (``ids``) have variance shares but no rule stats."""

    def __init__(self, root: Path, ids: set[str]) -> None:
        self.run, self.ids = RunDir(root), ids

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        if cell_id not in self.ids:
            return self.run.read_artifact(cell_id, suffix)
        buf = io.BytesIO()
        v = np.array([1.0, 1.0] + [0.0] * 6)
        np.savez(
            buf, **{"layer0.var_share": v / 2, "layer0.var_within": v, "layer0.var_between": 0 * v}
        )
        return buf.getvalue()


def test_report_has_pruning_table_and_table1(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = specs.write_spec(tmp_path, SPEC)
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    res = pd.read_csv(out / "results.csv")
    assert list(res.columns[:3]) == ["method", "seed", "split"]
    assert sorted(res["split"].unique()) == [0, 1]
    assert res.loc[res["method"] == "GD", "pruned_frac"].eq(0).all()
    assert res.loc[res["method"] == "ES", "pruned_frac"].isna().all()
    summ = pd.read_csv(out / "summary.csv")
    assert "split" not in summ.columns and (summ["n"] == 2).all()  # over splits
    for cell in res["cell_id"][res["method"].isin(["MF", "GD", "FC"])]:
        assert (out / "cells" / f"{cell}.pruning.npz").is_file()
    md = (out / "report.md").read_text()
    assert "Over-pruning: pruned hidden units" in md and "Table 1 (quoted)" in md
    assert "MF: -2.62 ± 0.06" in md and "(HMC, not run)" in md
    for stem in (
        "pruning_units_layer0",
        "pruning_trajectories",
        "pruning_unit_posteriors_MF",
        "pruning_shares_layer0",
    ):
        assert (out / "figures" / f"{stem}.png").is_file()
    # the rule-free measure: finite for GD (which the rule cannot prune), beside the rule
    bayes = res[res["method"].isin(["MF", "GD", "FC"])]
    assert np.isfinite(bayes["units_eff.layer0"]).all()
    assert ((bayes["units_eff.layer0"] >= 1) & (bayes["units_eff.layer0"] <= 8)).all()
    np.testing.assert_allclose(bayes["units_eff_frac.layer0"], bayes["units_eff.layer0"] / 8)
    assert bayes["pruned_var_share.layer0"].between(0, 1).all()
    assert EFFECTIVE in md and "Agreement between the two is the check on the rule" in md
    assert "variance share of rule-pruned units" in md
    # a run stored before the measure: no table and no share figure, the rest as before
    spec = specs.load(tmp_path, SPEC)
    old = res.drop(
        columns=[c for c in res.columns if c.startswith(("units_eff", "pruned_var_share"))]
    )
    sections = pruning_sections(old, _OldRun(out), spec)
    titles = [s.title for s in sections]
    assert EFFECTIVE not in titles and "Over-pruning: pruned hidden units" in titles
    figs = [stem for s in sections for stem, _ in s.figures]
    assert "pruning_units_layer0" in figs and not any("shares" in f for f in figs)
    new = pruning_sections(res, RunDir(out), spec)
    table = next(s.tables[0] for s in new if s.title == EFFECTIVE)
    assert table[0][:4] == ["method", "hidden layer", "effective units", "units in the layer"]
    # every method has a row: the point estimates get the rule-free measure too
    assert [r[0] for r in table[1]] == ["ES", "MAP", "MF", "GD", "FC"]
    assert all(r[3] == "8" for r in table[1])
    # where the study records point estimates too: their row, no rule, a panel of shares
    with_map = res.copy()
    is_map = with_map["method"] == "MAP"
    with_map.loc[is_map, ["units_eff.layer0", "units_eff_frac.layer0"]] = [2.0, 0.25]
    new = pruning_sections(with_map, _WithPoint(out, set(res["cell_id"][is_map])), spec)
    table = next(s.tables[0] for s in new if s.title == EFFECTIVE)
    row = next(r for r in table[1] if r[0] == "MAP")
    assert row[:4] == ["MAP", "0", "2 ± 0", "8"]  # 2 splits, the same value: no spread
    assert row[5:7] == ["n/a (no posterior std)", ""]
    share_fig = next(f for s in new for stem, f in s.figures if stem == "pruning_shares_layer0")
    assert "MAP: 2.0 effective of 8" in [ax.get_title() for ax in share_fig.axes]
    assert "pruning_units_layer0" in [stem for s in new for stem, _ in s.figures]


def test_functional_measure_on_a_constructed_network(tmp_path: Path, cell_context) -> None:
    """One unit carries all the output, the others have zero outgoing weights: shares
    (1, 0, ...) and one effective unit; equal units: all 8."""
    ctx = cell_context(_cell(specs.load(tmp_path, SPEC), "MF"))
    gen = torch.Generator().manual_seed(0)
    draws = {
        "layer0.weight": torch.randn(3, 8, 13, generator=gen),
        "layer0.bias": torch.randn(3, 8, generator=gen),
        "layer1.weight": torch.zeros(3, 1, 8),
        "layer1.bias": torch.zeros(3, 1),
    }
    draws["layer1.weight"][:, 0, 0] = torch.randn(3, generator=gen)
    shares, arrays = functional_outputs(ctx.model, ctx.data.x_test, draws)
    np.testing.assert_array_equal(shares[0], np.eye(8)[0])
    assert set(arrays) == {"layer0.var_share", "layer0.var_within", "layer0.var_between"}
    equal = {
        **draws,
        "layer0.weight": draws["layer0.weight"][:, :1].expand(3, 8, 13),
        "layer0.bias": draws["layer0.bias"][:, :1].expand(3, 8),
        "layer1.weight": torch.ones(3, 1, 8),
    }
    shares, _ = functional_outputs(ctx.model, ctx.data.x_test, equal)
    np.testing.assert_allclose(shares[0], np.full(8, 1 / 8))


@pytest.mark.parametrize("method", ["GD", "MAP"])
def test_probe_measures_gd_and_point_estimates(tmp_path: Path, cell_context, method) -> None:
    spec = specs.load(tmp_path, SPEC)
    ctx = cell_context(_cell(spec, method))
    probe = PruningProbe(spec.studies[0], ctx)  # MAP's cell has no study (families)
    metrics, files = probe.finish(_fit(ctx))  # no trajectory: not needed here
    assert 1.0 <= metrics["units_eff.layer0"] <= 8.0
    assert np.isfinite([metrics["units_eff_frac.layer0"], metrics["units_eff_frac"]]).all()
    with np.load(io.BytesIO(files[".pruning.npz"])) as z:
        assert z["layer0.var_share"].sum() == pytest.approx(1.0)
        if method == "MAP":  # one set of weights: no rule, nothing between draws
            assert "pruned_frac" not in metrics and "layer0.pruned" not in z.files
            assert not z["layer0.var_between"].any()
        else:
            assert metrics["pruned_frac"] == 0.0 and "pruned_var_share.layer0" in metrics


@pytest.mark.slow
def test_deeper_networks_report_pruning_per_layer(tmp_path: Path) -> None:
    out = tmp_path / "run"
    deeper = {**SPEC, "model": specs.mlp(depth=2, width=8, activation="tanh")}
    assert (
        main(
            [
                "run",
                str(specs.write_spec(tmp_path, deeper)),
                "--out",
                str(out),
                "--no-progress",
                "--workers",
                "1",
                "--set",
                "sweep.split=[0]",
            ]
        )
        == 0
    )
    res = pd.read_csv(out / "results.csv")
    assert {"pruned_frac.layer0", "pruned_frac.layer1", "units_eff.layer1"} <= set(res.columns)
    md = (out / "report.md").read_text()
    assert "pruned layer1" in md and EFFECTIVE in md
    assert (out / "figures" / "pruning_shares_layer1.png").is_file()


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
    spec = specs.load(
        tmp_path,
        name="n",
        data=specs.teacher(n_train=20, n_test=20, width=3, seed=1),
        model=specs.mlp(depth=1, width=3, activation="tanh"),
        likelihood=specs.section("gaussian", noise=0.1),
        inference=[specs.nuts("NUTS", warmup=15, draws=15, max_tree_depth=4)],
        studies=[specs.study("pruning", draws=10)],
    )
    out = run_cell(spec.cells()[0], Runtime.cpu())
    assert 0.0 <= out.metrics["pruned_frac"] <= 1.0
    assert 1.0 <= out.metrics["units_eff.layer0"] <= 3.0
    assert ".pruning.npz" in out.artifacts and ".nc" in out.artifacts
    assert "kl_diag_full" not in out.metrics  # no price-of-mean-field study in this spec


@pytest.mark.parametrize("name", ["depth", "teacher", "uci", "uci_paper"])
def test_overpruning_specs_use_local_reparameterization_for_mf_and_gd(name: str) -> None:
    """As the paper did (section 4: 'the local reparameterization trick on MF and GD')."""
    spec = load_spec(Path(__file__).resolve().parents[3] / "specs" / f"overpruning_{name}.yaml")
    guides = [m.guide for m in spec.inference if getattr(m, "guide", None) is not None]
    kinds = {g.kind for g in guides}
    assert {"mean_field", "fixed_variance"} <= kinds
    for g in guides:
        assert getattr(g, "local_reparam", False) == (g.kind in ("mean_field", "fixed_variance"))


def test_the_nulls_of_the_rule_free_measure(tmp_path: Path, cell_context) -> None:
    """The measure's nulls. Units whose incoming weights and bias are all 0 (tanh(0) = 0: no
    variance) are switched off: 4 of 8 carry the output, and shuffling the layer's entries
    over all positions spreads the zeros so that every unit varies (more effective units).
    Without unit structure (i.i.d. weights) the measure sits among its shuffles. Prior draws
    have the prior's scale; the prior null is one network at a time."""
    ctx = cell_context(_cell(specs.load(tmp_path, SPEC), "MF"))
    gen = torch.Generator().manual_seed(1)
    s = 6
    iid = {
        "layer0.weight": torch.randn(s, 8, 13, generator=gen),
        "layer0.bias": torch.randn(s, 8, generator=gen),
        "layer1.weight": torch.randn(s, 1, 8, generator=gen),
        "layer1.bias": torch.zeros(s, 1),
    }
    pruned = {**iid, "layer1.weight": torch.ones(s, 1, 8)}
    pruned["layer0.weight"] = iid["layer0.weight"].clone()
    pruned["layer0.weight"][:, 4:] = 0.0
    pruned["layer0.bias"] = iid["layer0.bias"].clone()
    pruned["layer0.bias"][:, 4:] = 0.0
    x = ctx.data.x_test
    prior = prior_draws(ctx.model, iid, 200, seed=3)
    assert {k: v.shape[1:] for k, v in prior.items()} == {k: v.shape[1:] for k, v in iid.items()}
    loc, scale = ctx.model.prior_params["layer0.weight"]
    assert float(prior["layer0.weight"].std()) == pytest.approx(scale, rel=0.05)
    off = functional_nulls(ctx.model, x, pruned, prior, seed=0)
    assert off["units_eff_sub.layer0"] <= 4.0 + 1e-9
    assert off["units_eff_shuffled.layer0"] > off["units_eff_sub.layer0"] + 1.0, off
    plain = functional_nulls(ctx.model, x, iid, prior, seed=0)
    gap = abs(plain["units_eff_sub.layer0"] - plain["units_eff_shuffled.layer0"])
    assert gap < 3 * plain["units_eff_shuffled_sd.layer0"] + 0.5, plain
    assert 1.0 < plain["units_eff_prior.layer0"] < 8.0
    assert plain["units_eff_prior_sd.layer0"] > 0
    # the prior null is per network: pooling the prior's draws evens the shares out
    pooled = effective_units(functional_outputs(ctx.model, x, prior)[0][0])
    assert pooled > plain["units_eff_prior.layer0"] + 1.0, (pooled, plain)
    one = shuffled_units_eff(ctx.model, x, pruned, 0, shuffles=2, seed=5)
    assert one == shuffled_units_eff(ctx.model, x, pruned, 0, shuffles=2, seed=5)


TEACHER = specs.spec(
    "prune_teacher",
    data={"kind": "teacher", "n_train": 5, "n_test": 30, "width": 4, "noise": 0.3},
    model=specs.mlp(depth=1, width=4, activation="tanh"),
    likelihood=specs.section("gaussian", noise="data"),
    inference=[
        specs.svi("MF", guide={"kind": "mean_field", "init_loc": "teacher"}, steps=20, **ADAM),
        specs.method("MAP", "map", steps=20, **ADAM),
    ],
    sweep={"data.noise": [0.3, 1.0], "data.n_train": [5, 10]},
    studies=[specs.study("pruning", draws=30)],
)


def test_posterior_functions_on_teacher_data(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = specs.write_spec(tmp_path, TEACHER)
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    res = pd.read_csv(out / "results.csv")
    spec = load_spec(path)
    for cell in spec.cells():
        with np.load(out / "cells" / f"{cell.cell_id}.pruning.npz") as z:
            x, draws, true = z["fn.x"], z["fn.draws"], z["fn.true"]
            n_draws = 1 if cell.method.name == "MAP" else 20
            assert draws.shape == (n_draws, 200) and z["fn.mean"].shape == (200,)
            assert z["fn.x_train"].shape == (cell.spec.data.n_train,)
            sd = z["fn.sd"]
        # the teacher's function in closed form: V tanh(W x + b) + c
        p = teacher_params(1, 4, 1.0, cell.spec.seed)
        h = np.tanh(x[:, None] @ p["layer0.weight"].T + p["layer0.bias"])
        f = h @ p["layer1.weight"][0] + p["layer1.bias"][0]
        np.testing.assert_allclose(true, f, rtol=1e-5, atol=1e-5)
        if cell.method.name == "MAP":  # one set of weights: no spread
            assert np.all(sd == 0)
    assert len(res) == 8
    for noise in ("0.3", "1.0"):  # a figure per noise level, rows n_train, columns methods
        name = f"pruning_functions_noise{noise}".replace(".", "_")
        assert (out / "figures" / f"{name}.png").is_file()
    assert "Over-pruning: posterior functions" in (out / "report.md").read_text()


def test_the_shipped_teacher_sweep_runs_shrunk(tmp_path: Path) -> None:
    out = tmp_path / "run"
    shrink = [f"inference.{m}.steps=10" for m in ("MF_true", "MF", "GD_true")]
    shrink += ["sweep.seed=[0]", "sweep.data.n_train=[5]", "sweep.data.noise=[1.0]"]
    shrink += ["data.n_test=20", "studies.0.draws=10"]
    spec = SPECS / "overpruning_teacher_sweep.yaml"
    args = ["run", str(spec), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main([*args, *(a for s in shrink for a in ("--set", s))]) == 0
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 3 and (res["status"] == "ok").all()
    assert (out / "figures" / "pruning_functions_noise1_0.png").is_file()
