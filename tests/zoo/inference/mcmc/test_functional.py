"""The ``torch.func`` potential of any network: equal to the hand-written MLP
potential, to autograd, and sampling a LeNet cell end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr
from torch import nn

from tests import specs
from zoo.execution.cell import run_cell
from zoo.inference.mcmc.functional import (
    CPU_CHUNK,
    ModulePotential,
    module_forward,
    potential_for,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.lenet import BayesianLeNet
from zoo.models.likelihoods import (
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    Likelihood,
)
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior
from zoo.runtime import Runtime

LIKELIHOODS = {
    "categorical": lambda: CategoricalLikelihood(3),
    "bernoulli": BernoulliLikelihood,
    "gaussian_learned": lambda: GaussianLikelihood(None, prior_scale=0.7),
    "gaussian_fixed": lambda: GaussianLikelihood(0.3),
}


def _data(lik: Likelihood, n: int, d: int, gen: torch.Generator, dtype=torch.float64):
    x = torch.randn(n, d, generator=gen, dtype=dtype)
    if isinstance(lik, GaussianLikelihood):
        return x, torch.randn(n, generator=gen, dtype=dtype)
    return x, torch.randint(0, max(lik.out_dim, 2), (n,), generator=gen)


@pytest.mark.parametrize("lik", LIKELIHOODS, ids=list(LIKELIHOODS))
@pytest.mark.parametrize("grad", ["autograd", "func"])
def test_generic_potential_equals_the_mlp_potential(lik: str, grad: str) -> None:
    gen = torch.Generator().manual_seed(0)
    likelihood = LIKELIHOODS[lik]()
    # He prior (per-layer scales, not uniform) and a nonzero bias loc would both be covered by
    # FlatPotential's prior code; He exercises the non-uniform precision branch
    model = BayesianMLP(4, [5, 6], likelihood, act="tanh", weight_prior=he_prior())
    x, y = _data(likelihood, 30, 4, gen)
    hand, generic = FlatPotential(model, x, y), ModulePotential(model, x, y, grad=grad)
    assert generic.dim == hand.dim and generic.site_slices == hand.site_slices
    z = 0.5 * torch.randn(5, hand.dim, generator=gen, dtype=torch.float64)
    u0, g0 = hand.value_and_grad_batch(z)
    u1, g1 = generic.value_and_grad_batch(z)
    torch.testing.assert_close(u1, u0, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(g1, g0, rtol=1e-12, atol=1e-9)
    # float32, the samplers' default dtype: equal to float rounding
    x32, y32 = x.float(), (y.float() if y.is_floating_point() else y)
    hand32, gen32 = FlatPotential(model, x32, y32), ModulePotential(model, x32, y32, grad=grad)
    u0, g0 = hand32.value_and_grad_batch(z.float())
    u1, g1 = gen32.value_and_grad_batch(z.float())
    torch.testing.assert_close(u1, u0, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(g1, g0, rtol=1e-4, atol=1e-4)
    v, g = generic.value_and_grad(z[2])  # one chain, unbatched
    assert v == pytest.approx(float(u1[2]), rel=1e-5)


@pytest.mark.parametrize("lik", ["categorical", "gaussian_learned"])
def test_lenet_gradients_equal_autograd_through_the_model(lik: str) -> None:
    gen = torch.Generator().manual_seed(1)
    likelihood = LIKELIHOODS[lik]()
    model = BayesianLeNet(36, likelihood, conv=(2, 3), dense=5, padding=1)
    x, y = _data(likelihood, 12, 36, gen)
    pot = ModulePotential(model, x, y, chunk=2)
    z = 0.3 * torch.randn(3, pot.dim, generator=gen, dtype=torch.float64)
    u, g = pot.value_and_grad_batch(z)
    for c in range(3):  # U through the Pyro model's log_likelihood, differentiated by autograd
        zc = z[c].clone().requires_grad_(True)
        ref = pot(zc)
        (ref_g,) = torch.autograd.grad(ref, zc)
        assert u[c].item() == pytest.approx(ref.item(), rel=1e-10)
        torch.testing.assert_close(g[c], ref_g, rtol=1e-9, atol=1e-9)


def test_a_plain_module_through_functional_call() -> None:
    gen = torch.Generator().manual_seed(2)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    mlp = BayesianMLP(3, [4], CategoricalLikelihood(2), act="tanh")
    x, y = _data(mlp.likelihood, 20, 3, gen)
    names = {"0.weight": "layer0.weight", "0.bias": "layer0.bias"}
    names |= {"2.weight": "layer1.weight", "2.bias": "layer1.bias"}
    fwd = module_forward(net)
    pot = ModulePotential(
        mlp, x, y, forward=lambda p, x: fwd({k: p[v] for k, v in names.items()}, x)
    )
    z = torch.randn(4, pot.dim, generator=gen, dtype=torch.float64)
    u, g = pot.value_and_grad_batch(z)
    u0, g0 = FlatPotential(mlp, x, y).value_and_grad_batch(z)
    torch.testing.assert_close(u, u0)
    torch.testing.assert_close(g, g0)


def test_potential_for_keeps_the_mlp_fast_path_and_checks_options() -> None:
    x, y = torch.randn(5, 16), torch.zeros(5, dtype=torch.long)
    mlp = BayesianMLP(16, [3], CategoricalLikelihood(2))
    lenet = BayesianLeNet(16, CategoricalLikelihood(2), conv=(2,), dense=3, pool=False)
    assert type(potential_for(mlp, x, y)) is FlatPotential
    generic = potential_for(lenet, x, y)
    assert type(generic) is ModulePotential and generic.chunk == CPU_CHUNK
    with pytest.raises(ValueError, match="grad='jvp'; use 'autograd' or 'func'"):
        ModulePotential(lenet, x, y, grad="jvp")
    with pytest.raises(ValueError, match="chunk=0"):
        ModulePotential(lenet, x, y, chunk=0)
    with pytest.raises(ValueError, match=r"expected \(chains, "):
        ModulePotential(lenet, x, y).value_and_grad_batch(torch.zeros(2, 3))


@pytest.mark.parametrize(
    "method",
    [
        specs.nuts(warmup=4, draws=4, chains=2, vectorize_chains=True, max_tree_depth=3),
        specs.chees(warmup=4, draws=4, chains=4, max_leapfrog=8, keep_draws=4),
        # the one-chain Pyro reference path, a dense block per layer (kernel, bias)
        specs.nuts(warmup=4, draws=4, chains=1, max_tree_depth=3, mass_matrix="block"),
    ],
    ids=["nuts", "chees", "nuts_one_chain_block"],
)
def test_a_lenet_cell_samples_end_to_end(tmp_path, method) -> None:
    # 60 4x4 "images" of 3 classes in a CSV: 45 to train on, 15 to test
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(60, 16, generator=gen), torch.arange(60) % 3
    rows = [",".join([f"p{i}" for i in range(16)] + ["label"])]
    rows += [
        ",".join([f"{v:.4f}" for v in xi.tolist()] + [str(int(yi))])
        for xi, yi in zip(x, y, strict=True)
    ]
    (tmp_path / "img.csv").write_text("\n".join(rows) + "\n")
    data = specs.section(
        "csv", path="img.csv", target="label", task="classification", test_fraction=0.25
    )
    spec = specs.load(
        tmp_path,
        specs.spec(
            "lenet_sampled",
            data=data,
            model=specs.section("lenet", conv=[2], dense=4, pool=False),
            inference=[{**method, "predictive_draws": 4}],
        ),
    )
    (cell,) = spec.cells()
    out = run_cell(cell, Runtime.cpu())
    m = out.metrics
    assert 0.0 <= m["accuracy"] <= 1.0 and m["nll"] == pytest.approx(m["nll"])  # finite
    with xr.open_datatree(out.artifacts[".nc"], engine="h5netcdf") as dt:
        kernel = dt["posterior"]["layer0.weight"]  # the conv kernel, per chain and draw
        assert kernel.shape == (method["chains"], 4, 2, 1, 3, 3)
        assert np.isfinite(kernel.values).all()
