"""The hand-written backward pass of FlatPotential (``hand_backward=True``) against autograd,
per activation, likelihood and prior it covers, and its fallback to autograd elsewhere; and
``grad_batch``, the gradient alone, against ``value_and_grad_batch``."""

from __future__ import annotations

import pytest
import torch

from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior, normal_prior

LIKELIHOODS = {
    "categorical": lambda: CategoricalLikelihood(3),
    "bernoulli": BernoulliLikelihood,
    "gaussian": lambda: GaussianLikelihood(0.3),
    "gaussian_learned_noise": lambda: GaussianLikelihood(None, prior_scale=0.8),
}


def _pot(lik: str, act: str, prior: str, hand: bool, slope: float = 0.1) -> FlatPotential:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(30, 3, generator=gen, dtype=torch.float64)
    likelihood = LIKELIHOODS[lik]()
    if lik == "categorical":
        y = torch.randint(0, 3, (30,), generator=gen)
    elif lik == "bernoulli":
        y = torch.randint(0, 2, (30,), generator=gen).double()
    else:
        y = torch.randn(30, generator=gen, dtype=torch.float64)
    wp = normal_prior(0.7) if prior == "normal" else he_prior()
    model = BayesianMLP(
        3, [4, 5], likelihood, act=act, negative_slope=slope, weight_prior=wp, bias_prior=wp
    )
    return FlatPotential(model, x, y, hand_backward=hand)


def _points(pot: FlatPotential, c: int = 4) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return 0.8 * torch.randn(c, pot.dim, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("lik", sorted(LIKELIHOODS))
@pytest.mark.parametrize("act", ["relu", "leaky_relu", "tanh", "linear"])
@pytest.mark.parametrize("prior", ["normal", "he"])
def test_hand_backward_equals_autograd(lik: str, act: str, prior: str) -> None:
    ref, hand = _pot(lik, act, prior, False), _pot(lik, act, prior, True)
    assert hand.hand_backward and not ref.hand_backward
    for z in _points(ref):
        u0, g0 = ref.value_and_grad(z)
        u1, g1 = hand.value_and_grad(z)
        assert u1 == pytest.approx(u0, rel=1e-12, abs=1e-9)
        torch.testing.assert_close(g1, g0, rtol=1e-10, atol=1e-10)
        assert g1.shape == (ref.dim,) and not g1.requires_grad


def test_hand_backward_falls_back_to_autograd_where_not_covered() -> None:
    # a leaky ReLU with a negative slope is not monotone: its derivative is not read off h
    ref, hand = (
        _pot("bernoulli", "leaky_relu", "he", False, -0.2),
        _pot("bernoulli", "leaky_relu", "he", True, -0.2),
    )
    assert not hand.hand_backward
    z = _points(ref)[0]
    u0, g0 = ref.value_and_grad(z)
    u1, g1 = hand.value_and_grad(z)
    assert u0 == u1 and torch.equal(g0, g1)


@pytest.mark.parametrize("lik", sorted(LIKELIHOODS))
def test_grad_batch_is_value_and_grad_batch_s_gradient(lik: str) -> None:
    pot = _pot(lik, "relu", "he", False)
    z = _points(pot, 5).float()
    pot32 = FlatPotential(
        pot.model, pot.x.float(), pot.y if lik == "categorical" else pot.y.float()
    )
    assert torch.equal(pot32.grad_batch(z), pot32.value_and_grad_batch(z)[1])
