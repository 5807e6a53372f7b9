"""The fused mean-field SVI step equals Pyro's ``SVI.step`` to the bit (also with local
reparameterization and a learned Gaussian noise), and fit_svi uses it."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

from guides import AutoFixedVarianceNormal, AutoKTiedNormal, AutoMatrixNormal, AutoMeanField
from zoo.execution.cell import run_cell
from zoo.execution.netcdf import datatree_from_bytes
from zoo.inference import Hooks
from zoo.inference import svi as svi_module
from zoo.inference.fused_svi import fused_step_applies
from zoo.inference.svi import fit_svi
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.runtime import Runtime
from zoo.spec import load_spec
from zoo.spec.sections.inference import SVIMethod

LIKELIHOODS = {
    "bernoulli": (BernoulliLikelihood, lambda g, n: torch.randint(0, 2, (n,), generator=g)),
    "categorical": (
        lambda: CategoricalLikelihood(3),
        lambda g, n: torch.randint(0, 3, (n,), generator=g),
    ),
    "gaussian": (lambda: GaussianLikelihood(0.3), lambda g, n: torch.randn(n, generator=g)),
}
#: a Gaussian likelihood with a learned noise (the site ``noise`` ~ HalfNormal(1))
LEARNED = (lambda: GaussianLikelihood(None), lambda g, n: torch.randn(n, generator=g))
GUIDES = {
    "mean_field": lambda m: AutoMeanField(m, init_scale=0.05),
    "mean_field_exp": lambda m: AutoMeanField(m, init_scale=0.05, scale_transform="exp"),
    "fixed_variance": lambda m: AutoFixedVarianceNormal(m, {"layer0.weight": 0.1} | _rest(m)),
    "fixed_variance_one": lambda m: AutoFixedVarianceNormal(m, 0.05),
    "k_tied": lambda m: AutoKTiedNormal(m, 2, init_scale=0.05),
}


def _rest(model: BayesianMLP) -> dict[str, float]:
    rest = {site: 0.02 for site in model.site_info() if site != "layer0.weight"}
    if getattr(model.likelihood, "noise", 0.0) is None:
        rest["noise"] = 0.1
    return rest


def _fit(likelihood: str, guide_name: str, fused: bool, local_reparam: bool = False):
    make_lik, make_y = LEARNED if likelihood == "learned" else LIKELIHOODS[likelihood]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=gen)
    y = make_y(gen, 50)
    model = BayesianMLP(2, [6, 4], make_lik())
    pyro.clear_param_store()
    guide = GUIDES[guide_name](model)
    grads: list[dict] = []
    hooks = Hooks(on_grads=lambda step, g: grads.append(g))
    # batches of 20 out of 50 (the last is 10: another likelihood scale), KL warm-up (the
    # weight changes every 4 steps), a learning rate of its own for the std parameters
    method = SVIMethod(
        name="t",
        kind="svi",
        guide={"kind": "mean_field", "local_reparam": local_reparam},
        steps=12,
        batch_size=20,
        lr=0.05,
        scale_lr=0.02,
        kl_warmup_steps=8,
        kl_warmup_every=4,
    )
    fit = fit_svi(
        model,
        guide,
        x,
        y,
        method,
        gen=torch.Generator().manual_seed(1),
        seed=3,
        hooks=hooks,
        fused=fused,
    )
    store = {k: v.detach().clone() for k, v in pyro.get_param_store().items()}
    return fit, store, grads


def _assert_same_fit(likelihood: str, guide_name: str, local_reparam: bool = False) -> None:
    pyro_fit, pyro_store, pyro_grads = _fit(likelihood, guide_name, False, local_reparam)
    fused_fit, fused_store, fused_grads = _fit(likelihood, guide_name, True, local_reparam)
    np.testing.assert_array_equal(fused_fit.losses, pyro_fit.losses)
    assert fused_fit.stats == pyro_fit.stats
    assert list(fused_store) == list(pyro_store)
    for name in pyro_store:
        assert torch.equal(fused_store[name], pyro_store[name]), name
    assert len(fused_grads) == len(pyro_grads) == 12
    for got, want in zip(fused_grads, pyro_grads, strict=True):
        assert got.keys() == want.keys()
        for name in want:
            assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("guide_name", list(GUIDES))
@pytest.mark.parametrize("likelihood", list(LIKELIHOODS))
def test_fused_step_equals_pyro_step_bitwise(likelihood: str, guide_name: str) -> None:
    _assert_same_fit(likelihood, guide_name)


@pytest.mark.parametrize("guide_name", list(GUIDES))
@pytest.mark.parametrize("local_reparam", [False, True])
def test_fused_step_with_a_learned_noise_equals_pyro_step_bitwise(
    guide_name: str, local_reparam: bool
) -> None:
    # the site noise: HalfNormal(1) prior, exp of a Normal in the guide, no closed-form KL
    _assert_same_fit("learned", guide_name, local_reparam)


@pytest.mark.parametrize("guide_name", list(GUIDES))
@pytest.mark.parametrize("likelihood", list(LIKELIHOODS))
def test_fused_local_reparameterization_equals_pyro_step_bitwise(
    likelihood: str, guide_name: str
) -> None:
    _assert_same_fit(likelihood, guide_name, local_reparam=True)


@pytest.mark.parametrize(("likelihood", "local_reparam"), [("bernoulli", False), ("learned", True)])
def test_fit_svi_takes_the_fused_step_for_mean_field(
    monkeypatch, likelihood: str, local_reparam: bool
) -> None:
    def no_svi(*args, **kwargs):
        raise AssertionError("fit_svi built Pyro's SVI for a mean-field MLP")

    def no_context(*args, **kwargs):
        raise AssertionError("fit_svi entered LocalReparameterization around the fused step")

    monkeypatch.setattr(svi_module, "SVI", no_svi)
    monkeypatch.setattr(svi_module, "LocalReparameterization", no_context)
    fit, _, _ = _fit(likelihood, "mean_field", True, local_reparam)
    assert np.isfinite(fit.losses).all()


def test_fused_step_applies_only_where_it_equals_pyro() -> None:
    model = BayesianMLP(2, [3], BernoulliLikelihood())
    learned_noise = BayesianMLP(2, [3], GaussianLikelihood(None))
    mf, mn = AutoMeanField(model), AutoMatrixNormal(model)
    ok = {"particles": 1, "closed_form_kl": True, "local_reparam": False}
    assert fused_step_applies(model, mf, **ok)
    assert fused_step_applies(model, AutoKTiedNormal(model), **ok)
    assert fused_step_applies(learned_noise, AutoMeanField(learned_noise), **ok)
    assert fused_step_applies(model, mf, **(ok | {"local_reparam": True}))
    assert fused_step_applies(
        model, AutoFixedVarianceNormal(model, 0.1), **(ok | {"local_reparam": True})
    )
    assert not fused_step_applies(model, mn, **ok)
    assert not fused_step_applies(model, mn, **(ok | {"local_reparam": True}))
    assert not fused_step_applies(model, mf, **(ok | {"particles": 2}))
    assert not fused_step_applies(model, mf, **(ok | {"closed_form_kl": False}))


def test_an_overpruning_cell_gives_the_same_results_with_the_fused_step(monkeypatch) -> None:
    """specs/overpruning_uci.yaml's MF and GD cells (local reparameterization, learned noise),
    shrunk to 50 steps: metrics, the pruning study's arrays and the ArviZ groups are the same
    with the fused step and with Pyro's (only the files' creation times differ)."""
    over = ["sweep.split=[0]", "inference.MF.steps=50", "inference.GD.steps=50"]
    spec = load_spec("specs/overpruning_uci.yaml", over)
    cells = [c for c in spec.cells() if c.method.name in ("MF", "GD")]
    assert [c.method.name for c in cells] == ["MF", "GD"]
    for cell in cells:
        with monkeypatch.context() as m:  # the fused step, or this raises
            m.setattr(svi_module, "SVI", None)
            fused = run_cell(cell, Runtime.cpu())
        with monkeypatch.context() as m:
            m.setattr(svi_module, "fused_step_applies", lambda *args, **kwargs: False)
            pyro_ = run_cell(cell, Runtime.cpu())
        plain = [
            {k: v for k, v in out.metrics.items() if not k.endswith("_seconds")}
            for out in (fused, pyro_)
        ]
        assert plain[0] == plain[1], cell.method.name
        assert set(fused.artifacts) == set(pyro_.artifacts) == {".nc", ".pruning.npz"}
        assert fused.artifacts[".pruning.npz"] == pyro_.artifacts[".pruning.npz"]
        a, b = (datatree_from_bytes(out.artifacts[".nc"]) for out in (fused, pyro_))
        assert [node.path for node in a.subtree] == [node.path for node in b.subtree]
        for node in a.subtree:
            assert node.to_dataset().equals(b[node.path].to_dataset()), node.path
