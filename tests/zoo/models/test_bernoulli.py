"""The Bernoulli likelihood: one logit for binary classification."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import zoo.data
import zoo.models
from tests import specs
from zoo.execution.cell import run_cell
from zoo.execution.evaluate import predictive_probs
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models import BernoulliLikelihood
from zoo.runtime import Runtime
from zoo.spec import SpecError

#: Two moons, MF-VI and batched NUTS from it, with a Bernoulli likelihood.
BERNOULLI = {
    "name": "bernoulli",
    "seed": 3,
    "data": specs.two_moons(n_train=40, n_test=30, noise=0.1),
    "model": specs.mlp(depth=1, width=4),
    "likelihood": specs.section("bernoulli"),
    "inference": [
        specs.svi("mfvi", steps=20, batch_size=20, predictive_samples=4),
        specs.nuts(
            init_from="mfvi",
            warmup=10,
            draws=6,
            chains=2,
            vectorize_chains=True,
            max_tree_depth=3,
            predictive_draws=4,
        ),
    ],
}


def test_log_likelihood_is_minus_torch_binary_cross_entropy(tmp_path):
    spec = specs.load(tmp_path, **BERNOULLI)
    ds = zoo.data.load(spec.data, 0)
    net = zoo.models.build(spec, ds)
    assert isinstance(net.likelihood, BernoulliLikelihood) and net.dims[-1] == 1
    gen = torch.Generator().manual_seed(0)
    params = {
        s: torch.randn((3, *shape), generator=gen) for s, (shape, _) in net.site_info().items()
    }
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    ll = net.log_likelihood(x, y, params)
    p = torch.sigmoid(net.apply(x, params).squeeze(-1).double())
    bce = F.binary_cross_entropy(p, y.double().expand(p.shape), reduction="none")
    assert ll.shape == (3, len(x))
    torch.testing.assert_close(ll.double(), -bce, rtol=1e-5, atol=1e-5)
    logp = net.likelihood.class_log_probs(net.apply(x, params))
    assert logp.shape == (3, len(x), 2)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, len(x)))
    torch.testing.assert_close(logp[..., 1].double(), p.log(), rtol=1e-4, atol=1e-5)
    probs = predictive_probs(net, x, params)
    assert probs.shape == (len(x), 2) and np.allclose(probs.sum(1), 1)


def test_flat_potential_uses_the_bernoulli_likelihood(tmp_path):
    spec = specs.load(tmp_path, **BERNOULLI)
    ds = zoo.data.load(spec.data, 0)
    net = zoo.models.build(spec, ds)
    x = torch.as_tensor(ds.x_train, dtype=torch.float64)
    pot = FlatPotential(net, x, torch.as_tensor(ds.y_train))
    z = torch.randn(3, pot.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    u = pot(z)
    params = pot.unravel(z)
    p = torch.sigmoid(net.apply(x, params).squeeze(-1))
    y = torch.as_tensor(ds.y_train, dtype=torch.float64)
    nll = F.binary_cross_entropy(p, y.expand(p.shape), reduction="none").sum(-1)
    prior = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1)
    torch.testing.assert_close(u, nll - prior)
    for i in range(3):
        ui, gi = pot.value_and_grad(z[i])
        assert ui == pytest.approx(float(u[i]), rel=1e-10)
        g = torch.func.grad(lambda zz: pot(zz))(z[i])
        torch.testing.assert_close(gi, g)
    ub, gb = pot.value_and_grad_batch(z)
    torch.testing.assert_close(ub, u)
    torch.testing.assert_close(gb[0], pot.value_and_grad(z[0])[1])


def test_two_moons_cell_with_mfvi_and_nuts_runs_end_to_end(tmp_path):
    cells = {c.method.name: c for c in specs.load(tmp_path, **BERNOULLI).cells()}
    for name in ("mfvi", "nuts"):
        out = run_cell(cells[name], Runtime.cpu())
        m = out.metrics
        assert 0 <= m["accuracy"] <= 1 and np.isfinite(m["nll"]) and 0 <= m["ece"] <= 1
        assert m["n_params"] == (2 + 1) * 4 + (4 + 1) * 1
    assert 0 <= m["agreement_vi"] <= 1 and np.isfinite(m["max_r_hat"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (specs.digits(), "'bernoulli' needs 2 classes; digits data has 10"),
        (specs.teacher(), "'bernoulli' does not fit regression data"),
    ],
    ids=["digits", "teacher"],
)
def test_validation_refuses_bernoulli_for_non_binary_tasks(tmp_path, data, message):
    with pytest.raises(SpecError) as e:
        specs.load(tmp_path, **{**BERNOULLI, "data": data})
    assert "likelihood.kind" in str(e.value) and message in str(e.value)


def test_a_csv_with_three_classes_is_refused_when_loaded(tmp_path):
    rows = "\n".join(f"{i},{i % 3}" for i in range(30))
    (tmp_path / "d.csv").write_text("a,y\n" + rows + "\n")
    data = specs.csv("d.csv", "y", task="classification")
    spec = specs.load(tmp_path, **{**BERNOULLI, "data": data})
    ds = zoo.data.load(spec.data, 0)
    with pytest.raises(ValueError, match="likelihood.kind: 'bernoulli' needs binary labels"):
        zoo.models.build(spec, ds)
