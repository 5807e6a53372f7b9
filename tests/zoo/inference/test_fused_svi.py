"""The fused mean-field SVI step equals Pyro's ``SVI.step`` to the bit, and fit_svi uses it."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

from guides import AutoFixedVarianceNormal, AutoKTiedNormal, AutoMatrixNormal, AutoMeanField
from zoo.inference import Hooks
from zoo.inference import svi as svi_module
from zoo.inference.fused_svi import fused_step_applies
from zoo.inference.svi import fit_svi
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.sections.inference import SVIMethod

LIKELIHOODS = {
    "bernoulli": (BernoulliLikelihood, lambda g, n: torch.randint(0, 2, (n,), generator=g)),
    "categorical": (
        lambda: CategoricalLikelihood(3),
        lambda g, n: torch.randint(0, 3, (n,), generator=g),
    ),
    "gaussian": (lambda: GaussianLikelihood(0.3), lambda g, n: torch.randn(n, generator=g)),
}
GUIDES = {
    "mean_field": lambda m: AutoMeanField(m, init_scale=0.05),
    "mean_field_exp": lambda m: AutoMeanField(m, init_scale=0.05, scale_transform="exp"),
    "fixed_variance": lambda m: AutoFixedVarianceNormal(m, {"layer0.weight": 0.1} | _rest(m)),
    "k_tied": lambda m: AutoKTiedNormal(m, 2, init_scale=0.05),
}


def _rest(model: BayesianMLP) -> dict[str, float]:
    return {site: 0.02 for site in model.site_info() if site != "layer0.weight"}


def _fit(likelihood: str, guide_name: str, fused: bool):
    make_lik, make_y = LIKELIHOODS[likelihood]
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
        guide={"kind": "mean_field"},
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


@pytest.mark.parametrize("guide_name", list(GUIDES))
@pytest.mark.parametrize("likelihood", list(LIKELIHOODS))
def test_fused_step_equals_pyro_step_bitwise(likelihood: str, guide_name: str) -> None:
    pyro_fit, pyro_store, pyro_grads = _fit(likelihood, guide_name, fused=False)
    fused_fit, fused_store, fused_grads = _fit(likelihood, guide_name, fused=True)
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


def test_fit_svi_takes_the_fused_step_for_mean_field(monkeypatch) -> None:
    def no_svi(*args, **kwargs):
        raise AssertionError("fit_svi built Pyro's SVI for a mean-field MLP")

    monkeypatch.setattr(svi_module, "SVI", no_svi)
    fit, _, _ = _fit("bernoulli", "mean_field", fused=True)
    assert np.isfinite(fit.losses).all()


def test_fused_step_applies_only_where_it_equals_pyro() -> None:
    model = BayesianMLP(2, [3], BernoulliLikelihood())
    learned_noise = BayesianMLP(2, [3], GaussianLikelihood(None))
    mf, mn = AutoMeanField(model), AutoMatrixNormal(model)
    ok = {"particles": 1, "closed_form_kl": True, "local_reparam": False}
    assert fused_step_applies(model, mf, **ok)
    assert fused_step_applies(model, AutoKTiedNormal(model), **ok)
    assert not fused_step_applies(model, mn, **ok)
    assert not fused_step_applies(learned_noise, AutoMeanField(learned_noise), **ok)
    assert not fused_step_applies(model, mf, **(ok | {"particles": 2}))
    assert not fused_step_applies(model, mf, **(ok | {"closed_form_kl": False}))
    assert not fused_step_applies(model, mf, **(ok | {"local_reparam": True}))
