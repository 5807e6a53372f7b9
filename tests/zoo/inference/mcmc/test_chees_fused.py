"""ChEES's in-place leapfrog loop against the out-of-place loop it replaced: the same numbers,
bit for bit (the draws of shipped ChEES cells must not move)."""

from __future__ import annotations

import pytest
import torch

from tests.zoo.inference.mcmc.test_sequential import _small
from zoo.inference.mcmc.chees import chees_transition
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.potential import FlatPotential


def _reference_trajectory(pot, z, g, eps, minv, n_steps, noise):
    """The loop before it was fused: new tensors every step, value and gradient each step."""
    r = noise.to(z.dtype) * minv.rsqrt()
    step, half = eps * minv, 0.5 * eps
    z1, r1 = z, torch.add(r, g, alpha=-half)
    for s in range(n_steps):
        z1 = torch.addcmul(z1, step, r1)
        u1, g1 = pot.value_and_grad_batch(z1)
        r1 = torch.add(r1, g1, alpha=-(eps if s < n_steps - 1 else half))
    return z1, u1.to(torch.float64), g1, minv * r1


def _targets():
    net, x, y = _small("classification")
    gauss = GaussianPotential(torch.diag(torch.linspace(0.5, 3.0, 6)).numpy())
    return {
        "net float32": FlatPotential(net.model, x.float(), y),
        "net float64": FlatPotential(net.model, x.double(), y),
        "gaussian": gauss,
    }


@pytest.mark.parametrize("name", ["net float32", "net float64", "gaussian"])
@pytest.mark.parametrize("n_steps", [1, 2, 7])
def test_fused_loop_is_bitwise_the_old_loop(name: str, n_steps: int) -> None:
    pot = _targets()[name]
    dtype = pot.x.dtype
    gen = torch.Generator().manual_seed(4)
    z = (0.5 * torch.randn(5, pot.dim, generator=gen, dtype=torch.float64)).to(dtype)
    noise = torch.randn(5, pot.dim, generator=gen, dtype=torch.float64).to(dtype)
    minv = torch.linspace(0.5, 2.0, pot.dim, dtype=dtype)
    u, g = pot.value_and_grad_batch(z)
    z_in = z.clone()
    logu = torch.full((5,), -1e9, dtype=torch.float64)  # accept every finite proposal
    z1, u1, g1, info = chees_transition(pot, z, u, g, 0.05, minv, n_steps, noise, logu)
    rz, ru, rg, rv = _reference_trajectory(pot, z, g, 0.05, minv, n_steps, noise)
    assert torch.equal(z, z_in)  # the input state is not written
    assert info.accepted.all()
    assert torch.equal(info.proposal, rz) and torch.equal(info.velocity, rv)
    assert torch.equal(z1, rz) and torch.equal(u1, ru) and torch.equal(g1, rg)
