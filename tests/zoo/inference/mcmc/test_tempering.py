"""Parallel tempering of the batched NUTS and HMC: the cold rung's draws are the posterior's
(a conjugate Gaussian's closed form), its chains cross between modes the untempered chains
do not (a tanh unit's two signs, each of posterior mass 1/2 exactly), the loop sees the cold
chains only, and a run stopped and resumed from its checkpoint is the run never stopped."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from tests.zoo.inference.mcmc.test_checkpoint import _stopped_then_resumed
from tests.zoo.inference.mcmc.test_sequential import _check_posterior, _regression
from zoo.inference.mcmc.batched import BatchMetric, new_point_batch, nuts_step_batch
from zoo.inference.mcmc.functional import ModulePotential
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.programs import program_for, run_method
from zoo.inference.mcmc.tempering import TemperedPotential, ladder
from zoo.models.likelihoods import BernoulliLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior
from zoo.spec.sections.samplers import HMCMethod, NUTSMethod

LADDER = {"rungs": 3, "beta_min": 0.1}


#: What the tempered sections here share.
BATCHED = {"name": "m", "vectorize_chains": True, "tempering": LADDER}


def _nuts(**kw) -> NUTSMethod:
    settings = dict(kind="nuts", chains=4, warmup=200, draws=300, max_tree_depth=5)
    return NUTSMethod(**{**BATCHED, **settings, **kw})


def _sign_pot() -> FlatPotential:
    """One tanh unit, y = 2 tanh(1.5 x) + noise: the posterior has two modes, (w, b, v) and
    (-w, -b, -v), of mass 1/2 each, apart by a barrier where v = 0 (about 100 nats)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.linspace(-2, 2, 20).unsqueeze(1)
    y = 2 * torch.tanh(1.5 * x[:, 0]) + 0.5 * torch.randn(20, generator=gen)
    return FlatPotential(BayesianMLP(1, [1], GaussianLikelihood(0.5), act="tanh"), x, y)


def test_ladder_and_the_tempered_potential() -> None:
    np.testing.assert_allclose(ladder(3, 0.25), [1.0, 0.5, 0.25])
    with pytest.raises(ValueError, match="rungs >= 2"):
        ladder(1, 0.5)
    pot = _regression()[0]
    z = torch.randn(3, pot.dim, generator=torch.Generator().manual_seed(1))
    betas = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    tp = TemperedPotential(pot, betas)
    u, g = tp.value_and_grad_batch(z)
    u1, g1 = pot.value_and_grad_batch(z)
    u0 = 0.5 * (z.double() ** 2).sum(1) - pot._const  # the N(0, 1) prior's energy
    np.testing.assert_allclose(u.numpy(), (betas * u1 + (1 - betas) * u0).numpy(), rtol=1e-6)
    np.testing.assert_allclose(g[0].numpy(), g1[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(g[2].numpy(), z[2].numpy(), rtol=1e-6)
    np.testing.assert_allclose(tp.grad_batch(z).numpy(), g.numpy(), rtol=1e-6)
    ell = tp.likelihood_energy(z, u)[:2]
    np.testing.assert_allclose(ell.numpy(), (u1 - u0)[:2].numpy(), rtol=1e-6)


def _bases() -> dict:
    """Bases of every path of the tempered potential: replayed with a closed prior, a
    per-layer prior, a learned noise, a vmapped module (no unfinished ``U``)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(30, 2, generator=gen), torch.randint(0, 2, (30,), generator=gen).float()
    yr = torch.randn(30, generator=gen)
    he = dict(weight_prior=he_prior(), bias_prior=he_prior())
    return {
        "replayed": FlatPotential(BayesianMLP(2, [5, 4], BernoulliLikelihood()), x, y),
        "per_layer": FlatPotential(BayesianMLP(2, [5, 4], BernoulliLikelihood(), **he), x, y),
        "noise": FlatPotential(BayesianMLP(2, [4], GaussianLikelihood(None)), x, yr),
        "module": ModulePotential(BayesianMLP(2, [4], BernoulliLikelihood()), x, y),
    }


class _Plain:
    """A potential that finishes every ``U`` at once (no ``finishes_later``)."""

    def __init__(self, pot) -> None:
        self.pot = pot

    def value_and_grad_batch(self, z):
        return self.pot.value_and_grad_batch(z)


@pytest.mark.parametrize("kind", ["replayed", "per_layer", "noise", "module"])
def test_the_tempered_potential_s_shortcuts_keep_its_bits(kind: str) -> None:
    """The tempered ``U`` and gradient equal their formula on the base's own (bitwise: the
    replayed base's prior term is the prior's energy, not a copy of its arithmetic), finished
    later on a stack or written into given tensors; batched NUTS draws the same bits either way."""
    base = _bases()[kind]
    betas = torch.tensor([1.0, 0.45, 0.2]).repeat_interleave(2).to(base.x.dtype)
    tp = TemperedPotential(base, betas)
    z = 0.7 * torch.randn(6, base.dim, generator=torch.Generator().manual_seed(1))
    ub, gb = base.value_and_grad_batch(z)
    u0, g0 = tp.prior_energy_and_grad(z)
    b = betas.unsqueeze(1)
    u, g = tp.value_and_grad_batch(z)
    assert torch.equal(u, betas.double() * ub + (1 - betas.double()) * u0)
    assert torch.equal(g, b * gb + (1 - b) * g0) and torch.equal(tp.grad_batch(z), g)
    later, g1 = tp.value_and_grad_batch(z, finish=False)
    stack = torch.stack([later, later])
    into = (torch.empty_like(stack), torch.empty(2, 6, base.dim))
    tp.value_and_grad_batch(z, False, (into[0][1], into[1][1]))
    assert torch.equal(into[0][1], later) and torch.equal(into[1][1], g) and torch.equal(g1, g)
    assert all(torch.equal(row, u) for row in tp.finish_batch(stack))
    runs = []
    for p in (tp, _Plain(tp)):
        metric, rngs = (
            BatchMetric(torch.ones(6, base.dim)),
            [np.random.default_rng(s) for s in range(6)],
        )
        gens = [torch.Generator().manual_seed(s) for s in range(6)]
        q, st = nuts_step_batch(
            p, metric, new_point_batch(metric, z, u, g, gens), torch.full((6,), 0.1), 4, rngs
        )
        runs.append((list(q), st))
    (q, st), (q2, st2) = runs
    assert all(torch.equal(a, c) for a, c in zip(q, q2, strict=True))
    assert all(np.array_equal(st[k], st2[k]) for k in st)


def test_the_cold_rung_samples_the_conjugate_posterior() -> None:
    pot, mean, cov = _regression()
    program = program_for(_nuts(draws=400), seed=0)
    res = run_method(_nuts(draws=400), pot, seed=0, program=program)
    assert res.facts == program.facts()  # the run's result carries its program's facts
    assert res.flat.shape == (4, 400, pot.dim) and res.adapted.step_size.shape == (4,)
    assert res.adapted.inverse_mass_matrix.shape == (4, pot.dim)
    _check_posterior(res, mean, cov)
    facts = program.facts()
    assert facts["tempering_rungs"] == 3 and facts["tempering_beta_min"] == 0.1
    assert all(0 < r < 1 for r in program.swap_rates()), facts
    assert facts["tempering_swap_rate_min"] == program.swap_rates().min()
    assert facts["tempering_round_trips"] > 0
    # the kept log density is the cold chains' untempered one, after the swaps
    flat = torch.from_numpy(res.flat.reshape(-1, pot.dim))
    lp = -pot.value_and_grad_batch(flat)[0].numpy().reshape(res.flat.shape[:2])
    np.testing.assert_allclose(res.sample_stats["lp"], lp, rtol=1e-5, atol=1e-4)


def _positive_share(res) -> np.ndarray:
    """Per chain, the share of draws with the output weight v > 0."""
    return (res.draws["layer1.weight"][..., 0, 0] > 0).mean(1)


def test_tempering_crosses_between_modes_of_known_mass() -> None:
    pot = _sign_pot()
    plain = run_method(_nuts(tempering=None, draws=400), pot, seed=2)
    hot = run_method(_nuts(tempering={"rungs": 6, "beta_min": 0.005}, draws=400), pot, seed=2)
    # untempered, every chain stays on its side of the barrier
    assert set(np.unique(_positive_share(plain))) <= {0.0, 1.0}
    share = _positive_share(hot)
    assert ((share > 0.1) & (share < 0.9)).all(), share
    # the pooled share within 4 s.e. (between chains) of its exact 1/2
    assert abs(share.mean() - 0.5) < 4 * max(share.std(ddof=1), 0.05) / 2, share


@pytest.mark.parametrize("stop_after", [30, 230])  # in the warm-up of 200, in the draws
@pytest.mark.parametrize("moves", ["off", "auto"])
def test_a_tempered_run_resumes_bitwise(stop_after: int, moves: str) -> None:
    section = _nuts(warmup=200, draws=60, symmetry_moves=moves)

    def run(channel):
        return run_method(section, _sign_pot(), seed=4, checkpoint=channel)

    plain = run(None)
    again, said = _stopped_then_resumed(run, stop_after)
    assert len(said) == 1 and "resumed" in said[0], said
    np.testing.assert_array_equal(plain.flat, again.flat)
    np.testing.assert_array_equal(plain.sample_stats["lp"], again.sample_stats["lp"])


def test_hmc_takes_a_ladder_and_the_section_refuses_what_cannot_go_with_it() -> None:
    hmc = HMCMethod(**BATCHED, kind="hmc", chains=2, warmup=30, draws=10, num_steps=5)
    res = run_method(hmc, _regression()[0], seed=1)
    assert res.flat.shape == (2, 10, 3) and np.isfinite(res.flat).all()
    with pytest.raises(pydantic.ValidationError, match="tempering is a setting of the batched"):
        _nuts(vectorize_chains=False)
    with pytest.raises(pydantic.ValidationError, match="mass_matrix: dense is one metric"):
        _nuts(mass_matrix="dense")
    with pytest.raises(pydantic.ValidationError, match="beta_min"):
        _nuts(tempering={"rungs": 3, "beta_min": 1.0})
