"""A user's Pyro model as the samplers' flat potential: equal to Pyro's own
potential, vmapped or row by row, and its parameter maps."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch

from zoo.inference.mcmc.pyro_potential import PyroPotential
from zoo.inference.mcmc.user import sample_chees


def _model(x, y=None):
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(x @ w, s), obs=y)


def _unvmappable(x, y=None):  # Python control flow on a value: vmap refuses it
    w = pyro.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    s = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    scale = s if s.item() > 0 else -s
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(x @ w, scale), obs=y)


def _data():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20, 2, generator=gen)
    return x, x @ torch.tensor([1.0, -1.0]) + 0.1


@pytest.mark.parametrize("model", [_model, _unvmappable], ids=["vmapped", "row_by_row"])
def test_the_potential_is_pyros_and_batches(model) -> None:
    pot = PyroPotential(model, _data())
    assert pot.site_shapes == {"w": (2,), "sigma": ()} and pot.dim == 3
    z = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    u, g = pot.value_and_grad_batch(z)
    assert pot.vectorized is (model is _model)
    for c in range(4):
        zc = z[c].clone().requires_grad_(True)
        ref = pot.pyro_potential_fn({"w": zc[:2], "sigma": zc[2]})  # Pyro's own
        (ref_g,) = torch.autograd.grad(ref, zc)
        assert u[c].item() == pytest.approx(ref.item(), rel=1e-5)
        torch.testing.assert_close(g[c], ref_g, rtol=1e-5, atol=1e-4)
        v, gc = pot.value_and_grad(z[c])
        assert v == pytest.approx(ref.item(), rel=1e-5)


def test_ravel_unravel_round_trip_through_the_constraint() -> None:
    pot = PyroPotential(_model, _data())
    z = torch.tensor([[0.5, -0.5, -1.0], [0.0, 1.0, 2.0]])
    params = pot.unravel(z)
    torch.testing.assert_close(params["sigma"], z[:, 2].exp())  # LogNormal: sigma = exp(z)
    torch.testing.assert_close(pot.ravel(params), z)
    start = pot.prior_draw(torch.Generator().manual_seed(0))
    assert start.shape == (3,) and bool((start.abs() < 2).all())
    with pytest.raises(KeyError, match="params lack sites"):
        pot.ravel({"w": params["w"]})


def test_errors_name_the_fix() -> None:
    with pytest.raises(ValueError, match="no continuous latent site"):
        PyroPotential(lambda: pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.0)))
    with pytest.raises(ValueError, match="chains=1: ChEES estimates its criterion across"):
        sample_chees(_model, *_data(), chains=1)


def test_a_diverged_chain_gets_nan_not_an_error() -> None:
    # a prior made while Pyro validates (as a PyroModule's PyroSample does) checks every
    # value it scores: the batched NUTS may integrate a diverged chain to inf and NaN
    with pyro.validation_enabled(True):
        prior = dist.Normal(torch.zeros(2), 1.0).to_event(1)

    def model(x, y=None):
        w = pyro.sample("w", prior)
        with pyro.plate("data", len(x)):
            pyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)

    pot = PyroPotential(model, _data())
    z = torch.tensor([[0.5, -0.5], [float("nan"), 0.0], [float("inf"), 1.0]])
    u, g = pot.value_and_grad_batch(z)
    assert torch.isnan(u[1:]).all() and torch.isnan(g[1:]).all()
    ref, ref_g = pot.value_and_grad(z[0])
    assert u[0].item() == pytest.approx(ref, rel=1e-6)
    torch.testing.assert_close(g[0], ref_g)
