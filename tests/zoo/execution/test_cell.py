"""run_cell: the per-cell flow, its outputs, and studies that leave the numbers alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import zoo.data
import zoo.models
from tests import specs
from zoo.execution.cell import CellOutput, run_cell
from zoo.execution.evaluate import OUTPUTS
from zoo.execution.preflight import CPU_ONLY_KINDS
from zoo.inference import METHODS, Hooks, combine_hooks, fit
from zoo.inference.sampling import mass_ratio
from zoo.runtime import Runtime

INFERENCE = [
    specs.svi("mfvi", pretrain_epochs=1, steps=15, batch_size=20, predictive_samples=5),
    specs.method("map", "map", steps=10),
    specs.method("mle", "mle", steps=10, eval_every=2),
    specs.nuts(
        init_from="mfvi",
        warmup=10,
        draws=6,
        chains=2,
        vectorize_chains=True,
        max_tree_depth=3,
        predictive_draws=5,
    ),
    specs.method("hmc", "hmc", warmup=10, draws=6, num_steps=2, predictive_draws=5),
    specs.chees(init_from="mfvi", warmup=20, draws=6, chains=4, keep_draws=6, predictive_draws=5),
    specs.method("mclmc", "mclmc", init_from="mfvi", warmup=6, draws=4, chains=2),
    specs.method("mams", "mams", warmup=6, draws=4, chains=2, max_steps=4),
]
STUDIES = [
    specs.study(
        "price_of_mean_field",
        methods=["nuts"],
        gaussian_fit={"cov": "empirical"},
        kl_target_draws=40,
    ),
    specs.study(
        "ktied",
        methods=["mfvi"],
        truncation_ranks=[1],
        truncation_draws=3,
        snr_steps=[15],
        snr_window=3,
        elbo_steps=[5],
        elbo_draws=2,
    ),
    specs.study("pruning", draws=4, trajectory_every=5, trajectory_draws=2),
    specs.study("product_matrix", draws=20),
]


def _cells(tmp_path: Path, studies=STUDIES):
    spec = specs.load(
        tmp_path,
        name="cell",
        seed=2,
        data=specs.two_moons(n_train=60, n_test=40, noise=0.1),
        model=specs.mlp(depth=2, width=4, activation="linear"),
        inference=INFERENCE,
        studies=studies,
    )
    return {c.method.name: c for c in spec.cells()}


def _plain(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.endswith("_seconds")}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every cell of `_cells` with its studies and without any."""
    tmp = tmp_path_factory.mktemp("cell")
    with_, without = _cells(tmp), _cells(tmp, [])
    rt = Runtime.cpu()
    return {name: (run_cell(with_[name], rt), run_cell(without[name], rt)) for name in with_}


def test_run_cell_returns_metrics_and_artifacts(outputs):
    for name, (out, _) in outputs.items():
        assert isinstance(out, CellOutput)
        assert {"width", "n_params", "n_train", "accuracy", "nll", "fit_seconds"} <= set(
            out.metrics
        )
        assert not any(k.startswith("_") for k in out.metrics), name
        assert all(isinstance(v, bytes) for v in out.artifacts.values())
    assert set(outputs["mfvi"][0].artifacts) == {
        ".nc",
        ".ktied.npz",
        ".pruning.npz",
        ".product_cov.npz",
    }
    # the pruning study's rule-free measure applies to point estimates too
    assert set(outputs["map"][0].artifacts) == {".pruning.npz"}
    assert set(outputs["nuts"][0].artifacts) == {".nc", ".pruning.npz"}
    assert {"neg_elbo", "final_loss", "n_var_params"} <= set(outputs["mfvi"][0].metrics)
    assert {"best_step", "final_loss"} <= set(outputs["mle"][0].metrics)
    assert {"agreement_vi", "max_r_hat", "n_divergent", "kl_diag_full", "draws_per_chain"} <= set(
        outputs["nuts"][0].metrics
    )
    assert "agreement_vi" not in outputs["hmc"][0].metrics  # started from the prior
    # the predictive probabilities' diagnostics beside the weights'
    nuts = outputs["nuts"][0].metrics
    assert nuts["max_r_hat_pred"] >= nuts["median_r_hat_pred"] > 0.9
    assert nuts["min_ess_bulk_pred"] > 0 and nuts["n_pred_constant"] >= 0


def test_an_svi_cell_records_its_psis_khat(outputs):
    """k-hat of the guide's importance ratios (guides.checks.psis_khat), on svi cells only,
    from its own seeded draws: the same with and without the studies."""
    with_, without = outputs["mfvi"]
    assert np.isfinite(with_.metrics["psis_khat"])
    assert with_.metrics["psis_khat"] == without.metrics["psis_khat"]
    assert all("psis_khat" not in out.metrics for n, (out, _) in outputs.items() if n != "mfvi")


def test_studies_do_not_change_the_cells_numbers(outputs):
    for name, (with_, without) in outputs.items():
        a, b = _plain(with_.metrics), _plain(without.metrics)
        if name == "nuts":  # the stopping rule draws on: other draws, other numbers
            assert a["draws_per_chain"] >= b["draws_per_chain"] == 6
            continue
        assert set(b) <= set(a), name
        for k, v in b.items():
            assert a[k] == v or (v != v and a[k] != a[k]), (name, k)


def test_run_cell_is_deterministic(tmp_path):
    cell = _cells(tmp_path)["mfvi"]
    a, b = (run_cell(cell, Runtime.cpu()).metrics for _ in range(2))
    assert _plain(a) == _plain(b)


def test_every_method_posterior_has_an_evaluation(tmp_path):
    cells = _cells(tmp_path, [])
    assert {type(c.method) for c in cells.values()} == set(METHODS)
    for cell in cells.values():
        spec, rt = cell.spec, Runtime.cpu()
        ds = zoo.data.load(spec.data, spec.seed)
        res = fit(
            cell.method,
            zoo.models.build(spec, ds),
            ds.to_torch(rt),
            seed=spec.seed,
            runtime=rt,
            others={m.name: m for m in spec.inference},
        )
        assert type(res.posterior) in OUTPUTS


def test_combine_hooks_calls_each_in_order_and_keeps_one_stopping_rule():
    seen = []
    a = Hooks(
        on_step=lambda s, g, loss: seen.append(("a", s)), stop_when=lambda d: True, max_draws=9
    )
    b = Hooks(on_step=lambda s, g, loss: seen.append(("b", s)), on_start=seen.append)
    h = combine_hooks([a, b])
    h.on_step(3, None, 0.5)
    h.on_start("guide")
    assert seen == [("a", 3), ("b", 3), "guide"]
    assert h.on_grads is None and h.max_draws == 9 and h.stop_when({}) is True
    assert combine_hooks([]) == Hooks()
    with pytest.raises(ValueError, match="stopping rule"):
        combine_hooks([a, a])


class _Probe:
    """A probe that reports one metric, ``dup``."""

    hooks = Hooks()

    def finish(self, fit):
        return {"dup": 1.0}, {}


def test_two_probes_reporting_one_metric_name_are_refused(tmp_path, monkeypatch):
    import zoo.execution.cell as cell_module
    from zoo.studies import STUDIES, StudyPlugin

    studies = [specs.study("pruning", draws=2), specs.study("product_matrix", draws=5)]
    cell = _cells(tmp_path, studies)["mfvi"]
    assert len(cell.studies) == 2
    fake = {
        type(s): StudyPlugin("fake", lambda section, ctx: _Probe(), lambda *a: [])
        for s in cell.studies
    }
    monkeypatch.setattr(cell_module, "STUDIES", {**STUDIES, **fake})
    with pytest.raises(ValueError, match=r"product_matrix and pruning studies both report.*'dup'"):
        run_cell(cell, Runtime.cpu())


@pytest.fixture
def default_device_meta():
    """torch's default device set to ``meta`` for the test: a tensor made without ``device=``
    lands on meta and meets the CPU data, as a CPU tensor would meet a CUDA run's data (the
    CPU stand-in for a CUDA check; ``pytest -k cuda`` runs the real one on a GPU)."""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)  # no device mode left behind for later tests


def test_every_method_and_study_makes_its_tensors_on_the_datas_device(
    outputs, tmp_path, default_device_meta
):
    # A model's priors made of Python floats put CPU tensors next to CUDA data: every cell of
    # the two_moons_depth_gpu spec failed on an H200 until the priors became buffers that
    # move with model.to(device) (zoo.models.priors.attach_normal_prior).
    studies = [
        *STUDIES,
        specs.study("laplace", curvature="ggn", refine_steps=5),
        specs.study("predictive", gaussian_fit={"cov": "empirical"}, draws=20, ood="far"),
    ]
    cells = _cells(tmp_path, studies)
    for name, cell in cells.items():
        if cell.method.kind in CPU_ONLY_KINDS:  # refused on CUDA (zoo.execution.preflight)
            continue
        out = run_cell(cell, Runtime.cpu())
        a, b = _plain(out.metrics), _plain(outputs[name][1].metrics)
        for k, v in b.items():  # NaN (a tiny sampler cell's R-hat) equals NaN here
            assert k in a and (a[k] == v or (v != v and a[k] != a[k])), (name, k)


def test_samplers_record_how_their_adapted_mass_compares_with_the_draws_spread(outputs):
    for name in ("nuts", "chees"):
        m = outputs[name][0].metrics
        assert 0 < m["mass_ratio_q05"] <= m["mass_ratio_median"], (name, m)
    # a mass frozen at a tenth of the spread reads 0.1; coordinates that never moved are left out
    var = np.array([1.0, 4.0, 0.0, 9.0])
    r = mass_ratio(np.stack([0.1 * var, 0.1 * var]), var)
    assert r["mass_ratio_median"] == pytest.approx(0.1) and r["mass_ratio_q05"] == pytest.approx(
        0.1
    )
    assert mass_ratio(None, var) == {"mass_ratio_q05": None, "mass_ratio_median": None}
