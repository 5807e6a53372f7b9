"""The k-tied study on small models: annealing schedule, LeNet, probe, truncation, report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import guides
import zoo.inference.svi as zsvi
from tests import specs
from zoo.execution.cell import run_cell
from zoo.inference import NO_HOOKS, Hooks, fit
from zoo.inference.svi import kl_weight_at
from zoo.runtime import Runtime
from zoo.spec.load import load_spec
from zoo.studies.ktied.probe import (
    CONTROL_SHUFFLES,
    KTiedProbe,
    diag_normal_kl,
    evaluate_loc_std,
    load_artifact,
    site_loc_std,
)

MF = specs.svi(
    "mf",
    guide={"kind": "mean_field", "init_scale": 0.01, "scale_transform": "exp"},
    steps=16,
    batch_size=64,
    lr=0.01,
    save_draws=False,
    predictive_samples=10,
)
K2 = specs.svi(
    "k2",
    guide={"kind": "k_tied", "rank": 2, "init_scale": 0.01},
    steps=16,
    batch_size=64,
    lr=0.01,
    kl_warmup_steps=20,
    kl_warmup_every=5,
    predictive_samples=10,
    save_draws=False,
)
MF_STUDY = specs.study(
    "ktied",
    methods=["mf"],
    truncation_ranks=[1, 2, 16],
    truncation_draws=10,
    snr_steps=[12, 16],
    elbo_steps=[5, 16],
    elbo_draws=2,
)
K2_STUDY = specs.study(
    "ktied", methods=["k2"], truncation_ranks=[], snr_steps=[16], elbo_steps=[16]
)
SPEC = specs.spec(
    "ktied_digits_test",
    seed=0,
    data=specs.digits(),
    model=specs.mlp(depth=2, width=16),
    prior=specs.section("normal", scale=0.2),
    inference=[MF, K2],
    studies=[MF_STUDY, K2_STUDY],
)


def _fit(ctx, hooks: Hooks = NO_HOOKS):
    cell = ctx.cell
    return fit(
        cell.method, ctx.model, ctx.data, seed=cell.spec.seed, runtime=ctx.runtime, hooks=hooks
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Both cells of SPEC run once through the runner (report included)."""
    from zoo.execution.runner import run_spec

    tmp = tmp_path_factory.mktemp("ktied")
    run_spec(specs.load(tmp, SPEC), tmp / "run", workers=1, progress=False, log=lambda m: None)
    return tmp / "run"


def _artifact(run_dir: Path, method: str):
    (path,) = (run_dir / "cells").glob(f"{method}_*.ktied.npz")
    return load_artifact(path)


def test_kl_annealing_schedule_is_linear_and_stepwise():
    # paper D.4: 5e-5 per batch, raised every 100 batches
    w = [kl_weight_at(s, 1.0, 20000, 100) for s in range(0, 20500)]
    assert w[0] == w[98] == 0.0 and w[99] == pytest.approx(0.005)
    assert w[100] == w[198] == pytest.approx(0.005) and w[199] == pytest.approx(0.01)
    assert w[19999] == 1.0 and w[-1] == 1.0
    assert len(set(w[:20000])) == 201  # 0, 0.005, ..., 1: one value per 100 batches
    assert [kl_weight_at(s, 0.5, 4) for s in range(6)] == [0.125, 0.25, 0.375, 0.5, 0.5, 0.5]
    assert kl_weight_at(3, 0.7, 0) == 0.7


@pytest.mark.parametrize(
    "name", ["ktied_mlp_mnist_paper", "ktied_mlp_fashion_paper", "ktied_lenet_paper"]
)
def test_paper_specs_anneal_to_about_0_73_in_300_epochs(name):
    # Swiatkowski et al. 2020, D.4: 5e-5 per batch, raised every 100 batches, ~300 epochs at
    # batch 1024 on 50,000 training images: the schedule ends near 0.73, not at 1
    spec = load_spec(Path(__file__).parents[3] / "specs" / f"{name}.yaml")
    for m in spec.inference:
        n_train = 60000 - spec.data.validation
        steps = m.epochs * math.ceil(n_train / m.batch_size)
        assert (m.epochs, m.batch_size, steps) == (300, 1024, 14700)
        last = kl_weight_at(steps - 1, m.kl_weight, m.kl_warmup_steps, m.kl_warmup_every)
        assert last == pytest.approx(0.735)


def test_spec_annealing_options_reach_fit_svi(tmp_path, monkeypatch, cell_context):
    spec = specs.load(tmp_path, SPEC)
    cell = spec.cells()[1]
    seen = []
    real = zsvi.fit_svi

    def spy(model, guide, x, y, method, **kw):
        seen.append(method)
        return real(model, guide, x, y, method.model_copy(update={"steps": 2}), **kw)

    monkeypatch.setattr(zsvi, "fit_svi", spy)
    _fit(cell_context(cell))
    assert seen[0].kl_warmup_steps == 20 and seen[0].kl_warmup_every == 5


def test_lenet_interface_and_conv_k_tied_layout():
    from zoo.models.lenet import BayesianLeNet
    from zoo.models.likelihoods import CategoricalLikelihood
    from zoo.models.priors import he_prior

    net = BayesianLeNet(
        64, CategoricalLikelihood(10), conv=(4, 6), dense=8, pool=False, weight_prior=he_prior()
    )
    info = net.site_info()
    assert info["layer0.weight"] == ((4, 1, 3, 3), 9) and info["layer1.weight"] == (
        (6, 4, 3, 3),
        36,
    )
    assert info["layer2.weight"] == ((8, 6 * 4 * 4), 96)
    assert net.prior_params["layer1.weight"][1] == pytest.approx(
        math.sqrt(2 / 36)
    )  # He, fan-in k^2 d
    assert net.num_params == sum(math.prod(s) for s, _ in info.values())
    x = torch.randn(5, 64)
    params = {s: torch.randn(3, *shape) * 0.3 for s, (shape, _) in info.items()}
    out = net.apply(x, params, chunk=2)
    assert out.shape == (3, 5, 10)
    one = net.apply(x, {k: v[1] for k, v in params.items()})
    torch.testing.assert_close(out[1], one)
    # k-tied on the conv kernels: one filter per row of the std matrix
    pyro.clear_param_store()
    g = guides.AutoKTiedNormal(net, rank=2)
    g(x, torch.zeros(5, dtype=torch.long))
    assert g.log_u.layer1.weight.shape == (6, 2) and g.log_v.layer1.weight.shape == (36, 2)
    sd = site_loc_std(g)["layer1.weight"][1]
    u, v = g.log_u.layer1.weight.exp(), g.log_v.layer1.weight.exp()
    torch.testing.assert_close(sd[2], (u[2] @ v.T).reshape(4, 3, 3).detach())


def test_diag_normal_kl_matches_torch():
    loc, sd = torch.randn(3, 4), torch.rand(3, 4) + 0.05
    got = diag_normal_kl({"w": (loc, sd)}, {"w": (0.1, 0.3)})
    want = torch.distributions.kl_divergence(dist.Normal(loc, sd), dist.Normal(0.1, 0.3)).sum()
    assert got == pytest.approx(float(want), rel=1e-6)


def test_study_outputs_and_truncation_on_digits(run_dir):
    rec, arrays = _artifact(run_dir, "mf")
    (cell_json,) = (run_dir / "cells").glob("mf_*[0-9a-f].json")
    metrics = json.loads(cell_json.read_text())["metrics"]
    assert not list((run_dir / "cells").glob("*.nc"))  # save_draws: false
    assert set(rec["truncation"]) == {"none", "1", "2", "16"}
    # rank >= min(m, n) reproduces the std matrices: same draws, same numbers
    for key in ("nll", "accuracy", "brier", "ece"):
        assert rec["truncation"]["16"][key] == pytest.approx(rec["truncation"]["none"][key])
    assert rec["truncation"]["1"]["nll"] != rec["truncation"]["none"]["nll"]
    # the shuffled-std control: every row, CONTROL_SHUFFLES shuffles, the same draws
    ctl = rec["truncation_control"]
    assert set(ctl) == {"none", "1", "2", "16"} and rec["control_shuffles"] == CONTROL_SHUFFLES
    assert all(len(v) == CONTROL_SHUFFLES for v in ctl.values())
    for a, b in zip(ctl["16"], ctl["none"], strict=True):  # full rank: the shuffled copy
        assert a["nll"] == pytest.approx(b["nll"])
    assert len({r["nll"] for r in ctl["none"]}) == CONTROL_SHUFFLES  # different shuffles
    # per-draw NLL >= the mixture's (Jensen), in every row; the posterior's in the metrics
    for res in [*rec["truncation"].values(), *(r for v in ctl.values() for r in v)]:
        assert res["nll_per_draw"] >= res["nll"] - 1e-12
    assert rec["predictive"] == rec["truncation"]["none"] and rec["predictive_draws"] == 10
    assert metrics["nll_per_draw"] == pytest.approx(rec["predictive"]["nll_per_draw"])
    assert set(rec["snr"]["layer1.weight"]) == {"12", "16"}
    assert set(rec["elbo_steps"]) == {"5", "16"} and rec["elbo_split"] == "test"
    lay = rec["layers"]["layer0.weight"]
    assert lay["shape"] == [16, 64] and lay["init_std_top1"] == pytest.approx(1.0)
    assert sum(lay["std_fractions"]) == pytest.approx(1.0)
    assert arrays["layer0.weight/std"].shape == (16, 64)
    assert metrics["std_top1.layer0.weight"] == pytest.approx(lay["std_fractions"][0])
    rec2, _ = _artifact(run_dir, "k2")
    assert rec2["rank"] == 2 and rec2["truncation"] == {} and rec2["truncation_control"] == {}
    # every cell has its posterior's per-draw and mixture NLL, truncated or not
    assert rec2["predictive"]["nll_per_draw"] >= rec2["predictive"]["nll"]
    f = rec2["layers"]["layer1.weight"]["std_fractions"]
    assert sum(f[:2]) == pytest.approx(1.0, abs=1e-6)  # a 2-tied std matrix has rank 2
    assert rec2["layers"]["layer1.weight"]["std_params"] == 2 * (16 + 16)
    assert set(rec2["snr"]["layer1.weight"]) == {"16"}


def test_probe_does_not_change_the_fit(tmp_path, cell_context):
    spec = specs.load(tmp_path, SPEC)
    cell = spec.cells()[0]
    runs = []
    for with_probe in (False, True):
        pyro.clear_param_store()
        ctx = cell_context(cell)
        hooks = KTiedProbe(cell.studies[0], ctx).hooks if with_probe else Hooks()
        runs.append(_fit(ctx, hooks).losses)
    np.testing.assert_array_equal(runs[0], runs[1])


def test_probe_needs_classification_data(tmp_path, cell_context):
    regression = {**SPEC, "data": specs.uci("boston"), "likelihood": specs.section("gaussian")}
    del regression["prior"]
    cell = specs.load(tmp_path, regression).cells()[0]
    with pytest.raises(ValueError, match="classification"):
        KTiedProbe(cell.studies[0], cell_context(cell))


def test_evaluate_loc_std_zero_std_is_the_point_estimate(tmp_path, cell_context):
    spec = specs.load(tmp_path, SPEC)
    ctx = cell_context(spec.cells()[0])
    model, ds = ctx.model, ctx.ds
    locs = {s: torch.randn(shape) * 0.1 for s, (shape, _) in model.site_info().items()}
    ls = {s: (v, torch.zeros_like(v)) for s, v in locs.items()}
    res = evaluate_loc_std(
        model,
        ctx.data.x_test,
        ds.y_test,
        ls,
        n_draws=3,
        gen=torch.Generator().manual_seed(0),
        n_train=100,
    )
    logp = torch.log_softmax(model.apply(ctx.data.x_test, locs), -1)
    nll = -logp[torch.arange(len(ds.y_test)), ctx.data.y_test].mean()
    assert res["nll"] == pytest.approx(float(nll), rel=1e-5)


def test_report_has_the_study_sections(run_dir):
    md = (run_dir / "report.md").read_text()
    for title in (
        "spectra of posterior means",
        "post-training low-rank truncation",
        "std matrix heat maps",
        "gradient signal-to-noise",
        "convergence",
        "parameter counts",
        "the std spectrum against a shuffled null",
        "per-draw and mixture NLL",
    ):
        assert f"k-tied study: {title}" in md
    assert (run_dir / "figures" / "heatmap_mf.png").is_file()
    assert "rank-1 truncation" in md
    assert "shuffled stds: NLL" in md and "sds above the shuffled mean" in md
    assert "most likely report per draw" in md and "ours minus 1" in md


@pytest.mark.slow
def test_lenet_cells_run_end_to_end_with_the_study(tmp_path):
    mf = {k: v for k, v in MF.items() if k != "save_draws"}  # its draws are checked
    lenet = {
        **SPEC,
        "model": specs.section("lenet", conv=[4, 8], dense=16, pool=False),
        "inference": [mf, K2],
        "studies": [{**MF_STUDY, "truncation_ranks": [1, 2]}, K2_STUDY],
    }
    spec = specs.load(tmp_path, lenet)
    mf, k2 = (run_cell(c, Runtime.cpu()) for c in spec.cells())
    assert ".nc" in mf.artifacts and mf.metrics["accuracy"] > 0.1
    rec, arrays = load_artifact(mf.artifacts[".ktied.npz"])
    assert rec["layers"]["layer1.weight"]["shape"] == [8, 4, 3, 3]
    assert arrays["layer1.weight/std"].shape == (8, 4, 3, 3)
    assert set(rec["truncation"]) == {"none", "1", "2"}
    rec2, _ = load_artifact(k2.artifacts[".ktied.npz"])
    f = rec2["layers"]["layer1.weight"]["std_fractions"]  # conv kernel as an 8 x 36 matrix
    assert len(f) == 8 and sum(f[:2]) == pytest.approx(1.0, abs=1e-6)
