"""MCLMC and MAMS: the isokinetic integrator against BlackJAX, the kernels, the recovery of
known posteriors (conjugate Bayesian linear regression, a correlated Gaussian) with one and
many chains, and the spec's ``mclmc``/``mams`` sections.

The BlackJAX numbers below were computed once with BlackJAX 1.7.1 (float64, JAX 0.10.2; the
peers' environment, never a dependency): ``isokinetic_mclachlan`` three steps of 0.4 on the
Gaussian of precision ``P`` with inverse mass matrix ``MINV``, and
``diagnostics.effective_sample_size`` of one chain of the AR(1) draws of ``_ar1``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from arviz_stats.base import array_stats

from tests.zoo.inference.mcmc.test_sequential import _regression
from zoo.inference.mcmc.ess import ess_per_chain
from zoo.inference.mcmc.functional import ModulePotential
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.mams import mams_transition, steps_mean_rescale
from zoo.inference.mcmc.mams_adaptation import mams_windows
from zoo.inference.mcmc.mclmc import (
    IsokineticState,
    esh_momentum_update,
    isokinetic_step,
    mclmc_transition,
    unit_vectors,
)
from zoo.inference.mcmc.mclmc_adaptation import mclmc_windows
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.samplers import run_mams, run_mclmc
from zoo.models.likelihoods import GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.sections.samplers import MAMSMethod, MCLMCMethod

F64 = torch.float64
P = np.array(
    [
        [2.0, 0.6, 0, 0, 0],
        [0.6, 1.0, 0.3, 0, 0],
        [0, 0.3, 0.5, 0, 0],
        [0, 0, 0, 4.0, 1.0],
        [0, 0, 0, 1.0, 1.5],
    ]
)
MINV = [0.5, 1.0, 2.0, 0.3, 0.8]
BLACKJAX_Z = [0.5627737694207862, -0.3209133358013462, 0.2215405524252304]
BLACKJAX_Z += [0.09766233762826251, 1.5176719350839616]
BLACKJAX_U = [0.18643310440566582, 0.6126471033997696, -0.27826935842072464]
BLACKJAX_U += [-0.16905839008978452, -0.6956232092030187]
BLACKJAX_LOGDENSITY, BLACKJAX_KINETIC = -2.145578824513128, 1.5414847874898356
BLACKJAX_ESS = [
    [62.5001872, 63.83263546, 90.43879154, 91.80153654],
    [73.37586585, 60.63036205, 0.0, 44.15874357],
    [67.40695537, 46.74303737, 65.81274057, 80.03802826],
]


def _gaussian() -> tuple[GaussianPotential, np.ndarray, np.ndarray]:
    """A correlated Gaussian: scales 0.5 to 2, correlation 0.6^|i-j| (float64)."""
    sd = np.array([0.5, 1.0, 2.0, 1.5])
    cov = 0.6 ** np.abs(np.subtract.outer(range(4), range(4))) * np.outer(sd, sd)
    return GaussianPotential(cov), np.zeros(4), cov


def _check(flat: np.ndarray, mean: np.ndarray, cov: np.ndarray, min_ess: float = 60) -> None:
    """Means and covariance entries within 4 Monte Carlo standard errors (each from the ESS
    of its own statistic), the variances' tolerance under 0.8 of the variance."""
    ess = array_stats.ess(flat, chain_axis=0, draw_axis=1, method="mean")
    assert ess.min() > min_ess, ess
    est = flat.reshape(-1, flat.shape[-1]).mean(0)
    np.testing.assert_array_less(np.abs(est - mean), 4 * np.sqrt(np.diag(cov) / ess))
    c = flat - mean
    for i in range(len(mean)):
        for j in range(i + 1):
            prod = c[..., i] * c[..., j]
            ess_ij = array_stats.ess(prod, chain_axis=0, draw_axis=1, method="mean")
            tol = 4 * prod.std() / np.sqrt(ess_ij)
            if i == j:
                assert tol < 0.8 * cov[i, i], (i, tol, cov[i, i])
            assert abs(prod.mean() - cov[i, j]) < tol, (i, j, prod.mean(), cov[i, j], tol)


# --------------------------------------------------------------------------- the integrator


def test_isokinetic_mclachlan_steps_are_blackjax() -> None:
    pot = GaussianPotential(np.linalg.inv(P))
    z = torch.tensor([[0.3, -1.2, 0.8, 0.1, 2.0]], dtype=F64)
    u = unit_vectors(torch.tensor([[1.0, 2.0, -1.0, 0.5, -0.3]], dtype=F64))
    state = IsokineticState(z, u, *pot.value_and_grad_batch(z))
    kinetic = 0.0
    for _ in range(3):
        state, k = isokinetic_step(
            pot, state, torch.tensor([0.4], dtype=F64), torch.tensor(MINV, dtype=F64).sqrt()
        )
        kinetic = kinetic + k
    np.testing.assert_allclose(state.z[0].numpy(), BLACKJAX_Z, rtol=0, atol=1e-13)
    np.testing.assert_allclose(state.u[0].numpy(), BLACKJAX_U, rtol=0, atol=1e-13)
    assert -float(state.potential[0]) == pytest.approx(BLACKJAX_LOGDENSITY, abs=1e-13)
    assert float(kinetic[0]) == pytest.approx(BLACKJAX_KINETIC, abs=1e-13)


def test_momentum_update_is_a_unit_flow() -> None:
    """The update keeps |u| = 1 and is the exact flow: t then t equals 2t (what lets MAMS
    fuse the updates between steps), kinetic changes adding up."""
    gen = torch.Generator().manual_seed(0)
    u = unit_vectors(torch.randn(3, 6, generator=gen, dtype=F64))
    g = 10 * torch.randn(3, 6, generator=gen, dtype=F64)
    s = torch.linspace(0.5, 1.5, 6, dtype=F64)
    t = torch.tensor([[0.3], [0.01], [2.0]], dtype=F64)
    a, va, ka = esh_momentum_update(u, g, t, s)
    b, _, kb = esh_momentum_update(a, g, t, s)
    c, _, kc = esh_momentum_update(u, g, 2 * t, s)
    torch.testing.assert_close(torch.linalg.vector_norm(b, dim=1), torch.ones(3, dtype=F64))
    torch.testing.assert_close(b, c, rtol=0, atol=1e-14)
    torch.testing.assert_close(ka + kb, kc, rtol=0, atol=1e-12)
    torch.testing.assert_close(va, a * s)
    # the momentum turns towards -grad U
    assert bool(((b * -g).sum(1) > (u * -g).sum(1)).all())


def test_ess_is_blackjax_on_one_chain() -> None:
    rng = np.random.default_rng(0)
    x = np.zeros((3, 400, 4))
    for t in range(1, 400):
        x[:, t] = 0.7 * x[:, t - 1] + rng.normal(size=(3, 4))
    x[1, :, 2] = 1.0  # never moves: 0
    ess = ess_per_chain(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ess, BLACKJAX_ESS, rtol=1e-8, atol=0)


def test_windows_and_rescale() -> None:
    assert mclmc_windows(200, True) == (60, 60, 20, 60)
    assert mclmc_windows(90, False) == (30, 30, 0, 30)
    assert mams_windows(103) == (20, 40, 60, 80, 103)
    # E round(U s + 1/2) = mean (BlackJAX's rescale), checked by quadrature
    for mean in (1.3, 2.0, 5.7, 40.0):
        v = (np.arange(200_000) + 0.5) / 200_000
        assert np.rint(0.5 + v * steps_mean_rescale(np.array(mean))).mean() == pytest.approx(
            mean, abs=1e-3
        )


# --------------------------------------------------------------------------- the kernels


class _Cliff(GaussianPotential):
    """A Gaussian whose potential and gradient are NaN beyond |z| > 3: a step there is undone."""

    def value_and_grad_batch(self, z):
        u, g = super().value_and_grad_batch(z)
        out = torch.linalg.vector_norm(z, dim=1) > 3
        return torch.where(out, torch.nan, u), torch.where(out.unsqueeze(1), torch.nan, g)


def test_mclmc_rows_are_independent_and_nonfinite_steps_are_undone() -> None:
    pot = _Cliff(np.linalg.inv(P))
    gen = torch.Generator().manual_seed(1)
    z = 0.5 * torch.randn(4, 5, generator=gen, dtype=F64)
    state = IsokineticState(
        z, unit_vectors(torch.randn(4, 5, generator=gen, dtype=F64)), *pot.value_and_grad_batch(z)
    )
    noise = tuple(torch.randn(4, 5, generator=gen, dtype=F64) for _ in range(2))
    eps = torch.tensor([0.1, 0.3, 40.0, 0.2], dtype=F64)  # chain 2 jumps off the cliff
    length = torch.tensor([1.0, 2.0, 1.0, float("inf")], dtype=F64)
    sm = torch.rand(4, 5, generator=gen, dtype=F64) + 0.5
    new, info = mclmc_transition(pot, state, eps, length, sm, noise)
    assert info.ok.tolist() == [True, True, False, True]
    torch.testing.assert_close(new.z[2], z[2], rtol=0, atol=0)
    torch.testing.assert_close(new.u[2], unit_vectors(noise[1][2:3])[0])
    assert float(info.energy_change[2]) == 0.0 and float(info.kinetic_change[2]) == 0.0
    for c in range(4):
        r = slice(c, c + 1)
        one, inf1 = mclmc_transition(
            pot,
            IsokineticState(*(x[r] for x in state)),
            eps[r],
            length[r],
            sm[r],
            (noise[0][r], noise[1][r]),
        )
        for a, b in zip(one, new, strict=True):
            torch.testing.assert_close(a, b[r], rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(
            inf1.energy_change, info.energy_change[r], rtol=1e-12, atol=1e-12
        )


def test_mams_trajectories_of_different_lengths_are_blackjax_steps() -> None:
    """Each chain of a batch runs its own number of steps; fused or not, the same points."""
    pot = GaussianPotential(np.linalg.inv(P))
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(3, 5, generator=gen, dtype=F64)
    u, g = pot.value_and_grad_batch(z)
    noise = torch.randn(3, 5, generator=gen, dtype=F64)
    sm = (torch.rand(3, 5, generator=gen, dtype=F64) + 0.5).sqrt()
    eps, n = torch.tensor([0.3, 0.2, 0.5], dtype=F64), np.array([3, 1, 5])
    logu = torch.log(torch.tensor([0.5, 1e-300, 0.999], dtype=F64))
    new, info = mams_transition(pot, IsokineticState(z, z, u, g), eps, n, sm, noise, logu)
    for c in range(3):
        r = slice(c, c + 1)
        st, kin = IsokineticState(z[r], unit_vectors(noise[r]), u[r], g[r]), 0.0
        for _ in range(n[c]):
            st, k = isokinetic_step(pot, st, eps[r], sm[r])
            kin = kin + k
        acc = torch.exp(-(st.potential - u[r] + kin)).clamp(max=1)
        torch.testing.assert_close(info.acceptance_rate[r], acc, rtol=0, atol=1e-13)
        want = st.z if bool(info.accepted[c]) else z[r]
        torch.testing.assert_close(new.z[r], want, rtol=0, atol=1e-14)
    assert bool(info.accepted[1])  # log u = -690: always accepted
    # a tiny step conserves the energy: acceptance 1
    tiny = mams_transition(pot, IsokineticState(z, z, u, g), eps * 1e-4, n, sm, noise, logu)[1]
    np.testing.assert_allclose(tiny.acceptance_rate.numpy(), 1.0, atol=1e-6)


# --------------------------------------------------------------------------- recovery

_RECOVERY = {
    # (sampler, target, chains, warmup, draws)
    "mclmc-gaussian-1": (run_mclmc, _gaussian, 1, 300, 2000),
    "mclmc-gaussian-16": (run_mclmc, _gaussian, 16, 200, 200),
    "mclmc-conjugate-16": (run_mclmc, _regression, 16, 200, 200),
    "mams-gaussian-16": (run_mams, _gaussian, 16, 150, 80),
}
_SLOW = {
    "mclmc-conjugate-1": (run_mclmc, _regression, 1, 300, 2000),
    # 1000 draws: at 700 the one chain's min ESS was 56.9 < 60 on a fresh install (2026-11-27)
    # (the code that had passed CI before gives the same 56.9 there); 118 at 1000
    "mams-gaussian-1": (run_mams, _gaussian, 1, 200, 1000),
    "mams-conjugate-1": (run_mams, _regression, 1, 150, 600),
    # MAMS needs its five windows long enough: at warmup 120 a bulk ESS of 35 in 640 draws
    # (many chains on the conjugate regression also run in test_mclmc_cells.py)
    "mams-conjugate-8": (run_mams, _regression, 8, 200, 80),
}


def _recover(run, target, chains: int, warmup: int, draws: int) -> None:
    pot, mean, cov = target()
    res = run(pot, seed=0, warmup=warmup, draws=draws, chains=chains, step_size=None)
    assert res.flat.shape == (chains, draws, pot.dim) and res.n_divergent == 0
    assert res.adapted.step_size.shape == (chains,)
    assert res.adapted.inverse_mass_matrix.shape == (chains, pot.dim)
    _check(res.flat, mean, cov)


@pytest.mark.parametrize("case", list(_RECOVERY))
def test_recovers_known_posterior(case: str) -> None:
    _recover(*_RECOVERY[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_SLOW))
def test_recovers_known_posterior_slow(case: str) -> None:
    _recover(*_SLOW[case])


def test_same_seed_same_draws_and_stats() -> None:
    pot, _, _ = _gaussian()
    for run, stats in (
        (
            run_mclmc,
            {"lp", "step_size", "n_steps", "diverging", "energy_change", "decoherence_length"},
        ),
        (
            run_mams,
            {"lp", "step_size", "n_steps", "diverging", "acceptance_rate", "trajectory_length"},
        ),
    ):
        a, b, c = (
            run(pot, seed=s, warmup=20, draws=10, chains=3, step_size=None) for s in (3, 3, 4)
        )
        np.testing.assert_array_equal(a.flat, b.flat)
        assert not np.array_equal(a.flat, c.flat)
        assert set(a.sample_stats) == stats
        for k in stats:
            assert a.sample_stats[k].shape == (3, 10), k
            np.testing.assert_array_equal(a.sample_stats[k], b.sample_stats[k])


def test_the_generic_potential_samples_as_the_mlp_potential() -> None:
    """Any network's potential (``torch.func``, chains vmapped 2 at a time) gives the draws of
    the hand-written MLP potential, float64 (MAMS's trajectories of different lengths
    evaluate odd subsets of the rows)."""
    gen = torch.Generator().manual_seed(0)
    model = BayesianMLP(3, [4], GaussianLikelihood(0.5), act="tanh")
    x = torch.randn(20, 3, generator=gen, dtype=F64)
    y = torch.randn(20, generator=gen, dtype=F64)
    hand, generic = FlatPotential(model, x, y), ModulePotential(model, x, y, chunk=2)
    for run in (run_mclmc, run_mams):
        a, b = (
            run(p, seed=1, warmup=25, draws=10, chains=3, step_size=None) for p in (hand, generic)
        )
        np.testing.assert_allclose(b.flat, a.flat, rtol=1e-7, atol=1e-9)
        np.testing.assert_array_equal(b.sample_stats["n_steps"], a.sample_stats["n_steps"])


# --------------------------------------------------------------------------- the spec


def test_spec_sections() -> None:
    m = MCLMCMethod(name="m", kind="mclmc")
    assert m.vectorize_chains and m.chains == 4 and m.adapt_mass_matrix
    assert MAMSMethod(name="a", kind="mams").target_accept == 0.9
    for bad in ({"vectorize_chains": True}, {"target_accept": 0.8}):
        with pytest.raises(ValueError, match="vectorize_chains|target_accept"):
            MCLMCMethod(name="m", kind="mclmc", **bad)
    with pytest.raises(ValueError, match="vectorize_chains"):
        MAMSMethod(name="a", kind="mams", vectorize_chains=False)
    for cls in (MCLMCMethod, MAMSMethod):
        assert all(f.description for f in cls.model_fields.values())
