"""The batched gradient by autograd's formulas without a graph (:mod:`zoo.inference.mcmc.replay`)
against autograd itself, bitwise: per activation, likelihood, prior, dtype, depth and chain
count it covers, with non-finite rows, at the default spec's shapes; and which potentials it
leaves to autograd."""

from __future__ import annotations

import pytest
import torch

from zoo.inference.mcmc import replay
from zoo.inference.mcmc.functional import ModulePotential
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior, normal_prior

LIKELIHOODS = {
    "bernoulli": BernoulliLikelihood,
    "gaussian": lambda: GaussianLikelihood(0.3),
    "categorical": CategoricalLikelihood,
    "gaussian_learned_noise": lambda: GaussianLikelihood(None, prior_scale=0.8),
}


def _pot(
    lik, act="relu", prior="normal", widths=(4, 5), n=30, d_in=3, dtype=torch.float64, classes=3
):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, d_in, generator=gen, dtype=dtype)
    if lik == "categorical":
        y = torch.randint(0, classes, (n,), generator=gen)
    elif lik == "bernoulli":
        y = torch.randint(0, 2, (n,), generator=gen).to(dtype)
    else:
        y = torch.randn(n, generator=gen, dtype=dtype)
    wp = normal_prior(0.7) if prior == "normal" else he_prior()
    model = BayesianMLP(
        d_in,
        list(widths),
        LIKELIHOODS[lik](classes) if lik == "categorical" else LIKELIHOODS[lik](),
        act=act,
        negative_slope=0.1,
        weight_prior=wp,
        bias_prior=wp,
    )
    return FlatPotential(model, x, y)


def _autograd(pot: FlatPotential, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``value_and_grad_batch`` computed before the replay: autograd of the energy."""
    z = z.detach().requires_grad_(True)
    u = pot._energy_batch(z)
    (g,) = torch.autograd.grad(u.sum(), z)
    return u.detach(), g


def _points(pot: FlatPotential, c: int, scale: float = 0.8) -> torch.Tensor:
    gen = torch.Generator().manual_seed(c)
    return scale * torch.randn(c, pot.dim, generator=gen, dtype=pot.x.dtype)


@pytest.mark.parametrize("lik", ["bernoulli", "gaussian", "categorical", "gaussian_learned_noise"])
@pytest.mark.parametrize("act", ["relu", "leaky_relu", "tanh", "linear"])
@pytest.mark.parametrize("prior", ["normal", "he"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_replay_is_autograd_bitwise(lik, act, prior, dtype) -> None:
    for widths in [(6,), (4, 5), (3, 4, 5)]:
        pot = _pot(lik, act, prior, widths, dtype=dtype)
        assert replay.replays(pot)
        for c in (1, 6):
            z = _points(pot, c)
            u0, g0 = _autograd(pot, z)
            u1, g1 = pot.value_and_grad_batch(z, finish=False)
            assert torch.equal(u1, u0) and torch.equal(g1, g0), (widths, c)
            assert torch.equal(pot.grad_batch(z), g0)
            assert u1.dtype == dtype and not g1.requires_grad
        # and one chain's: the batch of one, replayed
        assert replay.replays_one(pot)
        for z in _points(pot, 3):
            _check_one(pot, z)


@pytest.mark.parametrize("c", [1, 16, 24, 64])
def test_replay_is_autograd_bitwise_at_the_default_spec_s_shapes(c) -> None:
    # two moons' 500 points, widths 7 and 7, float32: the bmm kernels at the sizes that run
    pot = _pot("bernoulli", "relu", "normal", (7, 7), n=500, d_in=2, dtype=torch.float32)
    for scale in (0.05, 1.0, 4.0):
        z = _points(pot, c, scale)
        u0, g0 = _autograd(pot, z)
        u1, g1 = pot.value_and_grad_batch(z, finish=False)
        assert torch.equal(u1, u0) and torch.equal(g1, g0)


def test_a_non_finite_row_is_autograd_s_and_leaves_the_others_alone() -> None:
    pot = _pot("bernoulli", "tanh", "he")
    z = _points(pot, 5)
    z[1, 3], z[3, 0] = float("inf"), float("nan")
    u0, g0 = _autograd(pot, z)
    u1, g1 = pot.value_and_grad_batch(z, finish=False)
    assert torch.equal(u1.isnan(), u0.isnan()) and torch.equal(g1.isnan(), g0.isnan())
    ok = [0, 2, 4]
    assert torch.equal(u1[ok], u0[ok]) and torch.equal(g1[ok], g0[ok])
    fin = g0.isfinite()
    assert torch.equal(g1[fin], g0[fin])


@pytest.mark.parametrize("classes", [2, 10])
def test_the_categorical_replay_is_autograd_s_at_the_paper_s_shapes(classes) -> None:
    # the 2-logit networks of the benchmarks and a 10-class one, float32, 16 chains
    pot = _pot("categorical", "relu", "normal", (21, 21), 500, 2, torch.float32, classes)
    for scale in (0.05, 1.0, 4.0):
        z = _points(pot, 16, scale)
        u0, g0 = _autograd(pot, z)
        u1, g1 = pot.value_and_grad_batch(z, finish=False)
        assert torch.equal(u1, u0) and torch.equal(g1, g0)


def test_a_learned_noise_is_autograd_s_to_the_sign_of_zero_at_the_over_pruning_shape() -> None:
    # specs/overpruning_uci_hmc.yaml: 13 inputs, 50 tanh units, Boston's 455 training
    # points, 16 chains, float32, the noise's HalfNormal prior; signed zeros compared too
    pot = _pot("gaussian_learned_noise", "tanh", "normal", (50,), 455, 13, torch.float32)
    for scale in (0.05, 0.5, 2.0):
        z = _points(pot, 16, scale)
        u0, g0 = _autograd(pot, z)
        u1, g1 = pot.value_and_grad_batch(z, finish=False)
        assert torch.equal(u1, u0) and torch.equal(g1, g0)
        assert torch.equal(g1.signbit(), g0.signbit())


def test_what_the_replay_leaves_to_autograd() -> None:
    assert replay.replays(_pot("categorical"))
    assert replay.replays(_pot("gaussian_learned_noise"))
    pot = _pot("bernoulli")
    pot.compiled = True  # a compiled energy keeps autograd (compile() sets this)
    assert not replay.replays(pot)
    module = ModulePotential(pot.model, pot.x, pot.y)  # its own (vmapped) energy
    assert not replay.replays(module)
    # and there value_and_grad_batch is still the energy's autograd gradient
    pot = _pot("gaussian_learned_noise")
    pot.compiled = True  # (the flag alone: the energy itself stays eager here)
    z = _points(pot, 3)
    u0, g0 = _autograd(pot, z)
    u1, g1 = pot.value_and_grad_batch(z, finish=False)
    assert torch.equal(u1, u0) and torch.equal(g1, g0)


@pytest.mark.parametrize("lik", ["bernoulli", "gaussian", "categorical", "gaussian_learned_noise"])
def test_into_writes_the_same_bits_into_the_given_tensors(lik) -> None:
    """``value_and_grad_batch(z, False, into)`` (batched NUTS's stacks) returns the given
    tensors holding what it returns without them, replayed or by autograd."""
    pot = _pot(lik, dtype=torch.float32)
    z = _points(pot, 6)
    u0, g0 = pot.value_and_grad_batch(z, finish=False)
    stack_u, stack_g = torch.full((2, 6), float("nan")), torch.full((2, 6, pot.dim), float("nan"))
    u1, g1 = pot.value_and_grad_batch(z, False, (stack_u[1], stack_g[1]))
    assert u1.data_ptr() == stack_u[1].data_ptr() and g1.data_ptr() == stack_g[1].data_ptr()
    assert torch.equal(stack_u[1], u0) and torch.equal(stack_g[1], g0)
    assert stack_u[0].isnan().all() and stack_g[0].isnan().all()
    assert pot.value_and_grad_batch.writes_into


# --- one chain --------------------------------------------------------------------------


def _autograd_one(pot: FlatPotential, z: torch.Tensor) -> tuple[float, torch.Tensor]:
    """What ``value_and_grad`` computed before: autograd of the one-chain energy."""
    z = z.detach().requires_grad_(True)
    u = pot._energy(z)
    (g,) = torch.autograd.grad(u, z)
    return u.item() + pot._offset, g


def _check_one(pot: FlatPotential, z: torch.Tensor) -> None:
    """One chain's gradient is the batched autograd's of a batch of one, bit for bit, and
    the one-chain autograd's to rounding (another layout: other sums' orders)."""
    u, g = pot.value_and_grad(z)
    ub, gb = _autograd(pot, z[None])
    assert u == ub.item() + pot._offset and torch.equal(g, gb[0])
    u0, g0 = _autograd_one(pot, z)
    tol = 1e-4 if z.dtype == torch.float32 else 1e-10
    assert abs(u - u0) <= tol * (1 + abs(u0))
    torch.testing.assert_close(g, g0, rtol=tol, atol=tol * (1 + float(g0.abs().max())))


@pytest.mark.parametrize("lik", ["bernoulli", "categorical"])
def test_one_chain_at_the_default_and_paper_shapes(lik) -> None:
    # the default spec's depths 1 and 2 (widths 24 and 7, 7) on 500 points, float32, and a
    # paper-size layer (the paper's depth 1 has width 199, on 10,000 points)
    for widths, n in [((24,), 500), ((7, 7), 500), ((199,), 2000)]:
        pot = _pot(lik, "relu", "normal", widths, n=n, d_in=2, dtype=torch.float32, classes=2)
        for scale in (0.05, 1.0):
            for z in _points(pot, 2, scale):
                _check_one(pot, z)


def test_one_chain_non_finite_points_stay_non_finite() -> None:
    pot = _pot("bernoulli", "tanh", "he")
    for bad in (float("inf"), float("nan")):
        z = _points(pot, 1)[0]
        z[3] = bad
        u, g = pot.value_and_grad(z)
        ub, gb = _autograd(pot, z[None])
        assert torch.equal(g.isnan(), gb[0].isnan()) and (u != u) == bool(ub.isnan())
        fin = gb[0].isfinite()
        assert torch.equal(g[fin], gb[0][fin])


def test_what_the_one_chain_replay_leaves_alone() -> None:
    assert replay.replays_one(_pot("gaussian_learned_noise"))
    pot = _pot("bernoulli")
    module = ModulePotential(pot.model, pot.x, pot.y)  # its own energy
    assert not replay.replays_one(module)
    hand = FlatPotential(pot.model, pot.x, pot.y, hand_backward=True)  # opt-in, other bits
    assert hand.hand_backward and not replay.replays_one(hand)
    pot.compiled = True  # a compiled batched energy: one chain keeps its own autograd
    assert not replay.replays_one(pot)
    z = _points(pot, 1)[0]
    u, g = pot.value_and_grad(z)
    u0, g0 = _autograd_one(pot, z)
    assert u == u0 and torch.equal(g, g0)
