"""ChEES-HMC: the kernel, the adaptation and the driver of zoo.inference.mcmc.chees.

The posterior checks reuse the conjugate Bayesian linear regression of ``test_sequential.py``
(closed-form Gaussian posterior, tolerance from the ESS); the adaptation checks use a known
diagonal Gaussian (:class:`~zoo.inference.mcmc.gaussian.GaussianPotential`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_sequential import (
    _check_posterior,
    _regression,
    _small,
    schema_defaults,
)
from zoo.inference.mcmc import samplers
from zoo.inference.mcmc.chees import chees_transition, halton, num_steps
from zoo.inference.mcmc.chees_adaptation import LEARNING_RATE, chees_adaptation
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.loop import EXTEND_EVERY
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.sections.samplers import ChEESMethod

#: ChEES with the schema's defaults for what a test does not set.
run_chees = functools.partial(
    samplers.run_chees, **schema_defaults(ChEESMethod, "target_accept", "max_leapfrog", "step_size")
)

STATS = ("lp", "step_size", "n_steps", "diverging", "energy", "acceptance_rate")


def _net(dtype: torch.dtype = torch.float64) -> FlatPotential:
    """A small tanh network with learned noise (a site with a constraint)."""
    pot, x, y = _small("regression")
    return FlatPotential(pot.model, x.to(dtype), y.to(dtype))


def test_halton_and_num_steps() -> None:
    assert [halton(i) for i in range(7)] == [0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
    # n = ceil(u T / eps), at least 1, at most max_leapfrog
    assert num_steps(0.5, math.log(1.0), math.log(0.1), 100) == 5
    assert num_steps(0.01, math.log(1.0), math.log(0.5), 100) == 1
    assert num_steps(0.99, math.log(1e3), math.log(1e-3), 64) == 64


def test_transition_rows_are_independent() -> None:
    """A batch of chains moves each row as a batch of that row alone would (same noise)."""
    pot = _net(torch.float64)
    gen = torch.Generator().manual_seed(0)
    c = 5
    z = 0.3 * torch.randn(c, pot.dim, generator=gen, dtype=torch.float64)
    u, g = pot.value_and_grad_batch(z)
    noise = torch.randn(c, pot.dim, generator=gen, dtype=torch.float64)
    noise[3] *= 1e3  # a chain whose energy error explodes: divergent, rejected
    logu = torch.rand(c, generator=gen, dtype=torch.float64).log()
    minv = torch.linspace(0.5, 1.5, pot.dim, dtype=torch.float64)
    zb, ub, gb, info = chees_transition(pot, z, u, g, 0.05, minv, 7, noise, logu)
    assert info.n_steps == 7 and info.diverging[3] and not info.accepted[3]
    assert bool(info.accepted.any()) and not bool(info.diverging[[0, 1, 2, 4]].any())
    torch.testing.assert_close(zb[3], z[3], rtol=0, atol=0)  # the divergent chain stays
    assert ub.dtype == torch.float64 and info.energy.dtype == torch.float64
    for i in range(c):
        r = slice(i, i + 1)
        zi, ui, gi, ii = chees_transition(pot, z[r], u[r], g[r], 0.05, minv, 7, noise[r], logu[r])
        torch.testing.assert_close(zi, zb[r], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ui, ub[r], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gi, gb[r], rtol=1e-12, atol=1e-10)
        for a, b in zip(ii[:-1], info[:-1], strict=True):
            torch.testing.assert_close(a, b[r], rtol=1e-12, atol=1e-10, equal_nan=True)


def test_transition_conserves_energy_for_small_steps() -> None:
    """A tiny step conserves the Hamiltonian: acceptance 1 and the energy of the start."""
    pot = _net(torch.float64)
    z = torch.zeros(2, pot.dim, dtype=torch.float64)
    u, g = pot.value_and_grad_batch(z)
    noise = torch.randn(2, pot.dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ones = torch.ones(pot.dim, dtype=torch.float64)
    *_, info = chees_transition(pot, z, u, g, 1e-4, ones, 3, noise, torch.zeros(2).double())
    np.testing.assert_allclose(info.acceptance_rate.numpy(), 1.0, atol=1e-6)
    h0 = u + 0.5 * (noise * noise).sum(1)
    np.testing.assert_allclose(info.energy.numpy(), h0.numpy(), rtol=1e-6)


@pytest.mark.parametrize(("chains", "warmup", "draws"), [(1, 600, 1000), (64, 300, 100)])
def test_recovers_conjugate_posterior(chains: int, warmup: int, draws: int) -> None:
    # one chain needs the longer warm-up (its ChEES criterion and mass windows see one chain)
    pot, mean, cov = _regression()
    res = run_chees(pot, seed=0, warmup=warmup, draws=draws, chains=chains)
    assert res.flat.shape == (chains, draws, 3) and res.n_divergent == 0
    assert res.drawn == res.kept == draws
    _check_posterior(res, mean, cov)


def test_keep_thins_evenly_and_on_draw_sees_every_draw() -> None:
    pot = _net(torch.float32)
    seen: list[torch.Tensor] = []

    def on_draw(z: torch.Tensor) -> None:
        assert z.shape == (3, pot.dim) and z.dtype == torch.float32
        seen.append(z.clone())

    kw = dict(seed=1, warmup=30, chains=3, max_leapfrog=8)
    # known length: stride ceil(37 / 10) = 4 from the start, never compacted
    a = run_chees(pot, draws=37, keep=10, on_draw=on_draw, **kw)
    assert len(seen) == 37 and a.drawn == 37
    assert list(a.kept_index) == list(range(0, 37, 4)) and a.kept == 10
    allz = torch.stack(seen, 1).numpy()
    np.testing.assert_array_equal(a.flat, allz[:, list(a.kept_index)])
    for k in STATS:
        assert a.sample_stats[k].shape == (3, 10), k
    # unknown length (until): the buffer fills and the stride doubles, dropping every other
    seen.clear()
    b = run_chees(
        pot, draws=10, keep=8, on_draw=on_draw, max_draws=200, until=lambda n, kept: n >= 60, **kw
    )
    idx, thin = list(b.kept_index), b.thin
    assert len(seen) == 60 == b.drawn and thin == 8
    assert idx == list(range(0, 60, thin)) and 4 <= len(idx) <= 8
    np.testing.assert_array_equal(b.flat, torch.stack(seen, 1).numpy()[:, idx])
    # the kept draws and their statistics are those of a run without thinning
    full = run_chees(pot, draws=60, **kw)
    np.testing.assert_array_equal(full.flat[:, idx], b.flat)
    for k in STATS:
        np.testing.assert_array_equal(full.sample_stats[k][:, idx], b.sample_stats[k])
    np.testing.assert_array_equal(
        full.sample_stats["lp"][:, idx],
        -np.stack(
            [
                pot.value_and_grad_batch(torch.from_numpy(b.flat[:, j]))[0].numpy()
                for j in range(len(idx))
            ],
            1,
        ),
    )


def test_until_and_max_draws() -> None:
    pot = _net(torch.float32)
    asked: list[int] = []

    def until(n: int, kept: np.ndarray) -> bool:
        assert kept.shape[1] == n
        asked.append(n)
        return n >= 10 + 2 * EXTEND_EVERY

    kw = dict(seed=2, warmup=20, chains=2, max_leapfrog=8)
    a = run_chees(pot, draws=10, max_draws=500, until=until, **kw)
    n = 10 + 2 * EXTEND_EVERY
    assert asked == [10, 10 + EXTEND_EVERY, n]
    assert a.flat.shape == (2, n, pot.dim) and a.drawn == n
    full = run_chees(pot, draws=n, **kw)
    np.testing.assert_array_equal(a.flat, full.flat)
    capped = run_chees(pot, draws=10, max_draws=40, until=lambda n, kept: False, **kw)
    assert capped.drawn == 40 and capped.sample_stats["lp"].shape == (2, 40)
    with pytest.raises(ValueError, match="max_draws must be >= draws"):
        run_chees(pot, draws=10, max_draws=5, until=lambda n, kept: True, **kw)
    with pytest.raises(ValueError, match="max_draws must be >= draws"):
        run_chees(pot, draws=10, until=lambda n, kept: True, **kw)


def _devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_runs_on_the_potentials_device_and_dtype(device: str, dtype: torch.dtype) -> None:
    _, x, y = _small("classification")
    # default N(0, 1) priors: FlatPotential keeps non-uniform prior constants on the CPU
    model = BayesianMLP(3, [4, 5], CategoricalLikelihood(3), act="tanh")
    pot = FlatPotential(model, x.to(device, dtype), y.to(device))
    seen = []
    res = run_chees(
        pot,
        seed=0,
        warmup=25,
        draws=4,
        chains=4,
        max_leapfrog=8,
        on_draw=lambda z: seen.append((z.device.type, z.dtype)),
    )
    assert seen == [(device, dtype)] * 4
    assert res.flat.dtype == (np.float32 if dtype == torch.float32 else np.float64)
    assert all(np.isfinite(v).all() for v in res.sample_stats.values())
    again = run_chees(pot, seed=0, warmup=25, draws=4, chains=4, max_leapfrog=8)
    np.testing.assert_array_equal(res.flat, again.flat)  # same seed, same draws
    other = run_chees(pot, seed=1, warmup=25, draws=4, chains=4, max_leapfrog=8)
    assert not np.array_equal(res.flat, other.flat)


def test_divergent_transitions_are_rejected() -> None:
    """A far too large step size: every transition diverges, every chain stays at its start."""
    pot = _net(torch.float64)
    z0 = 0.1 * torch.randn(
        3, pot.dim, generator=torch.Generator().manual_seed(4), dtype=torch.float64
    )
    res = run_chees(
        pot,
        seed=0,
        warmup=0,
        draws=5,
        chains=3,
        step_size=50.0,
        trajectory_length=500.0,
        init=pot.unravel(z0),
    )
    assert res.sample_stats["diverging"].all() and res.n_divergent == 15
    assert res.divergences == 15
    np.testing.assert_array_equal(res.sample_stats["acceptance_rate"], 0.0)
    np.testing.assert_allclose(
        res.flat, np.broadcast_to(z0.numpy()[:, None], res.flat.shape), rtol=1e-12
    )


class _NaNAfterStart(GaussianPotential):
    """Finite at the start only: every later evaluation is NaN (all transitions diverge)."""

    calls = 0

    def value_and_grad_batch(self, z):
        self.calls += 1
        u, g = super().value_and_grad_batch(z)
        return (u, g) if self.calls == 1 else (u * math.nan, g)


def test_collapsed_step_size_raises() -> None:
    pot = _NaNAfterStart(np.eye(3))
    with pytest.raises(FloatingPointError, match="collapsed.*lower target_accept"):
        run_chees(
            pot, seed=0, warmup=100, draws=2, chains=4, step_size=0.1, adapt_mass_matrix=False
        )


def test_init_per_chain_shared_and_prior() -> None:
    pot = _net(torch.float64)
    gen = torch.Generator().manual_seed(5)
    starts = 0.2 * torch.randn(3, pot.dim, generator=gen, dtype=torch.float64)
    kw = dict(seed=0, warmup=0, draws=1, chains=3, step_size=1e-7)  # (almost) no move

    def first(init):
        res = run_chees(pot, init=init, **kw)
        return res.flat[:, 0], res.init

    per, how = first(pot.unravel(starts))  # constrained values: noise as sigma
    assert how == "per chain"
    np.testing.assert_allclose(per, starts.numpy(), atol=1e-6)
    shared, how = first(pot.unravel(starts[1]))
    assert how == "shared"
    np.testing.assert_allclose(shared, np.broadcast_to(starts[1].numpy(), (3, pot.dim)), atol=1e-6)
    prior, how = first(None)
    assert how == "prior" and np.isfinite(prior).all()
    assert not np.allclose(prior[0], prior[1])  # each chain its own prior draw
    with pytest.raises(ValueError, match="chains=3"):
        first(pot.unravel(starts[:2]))
    bad = pot.unravel(starts)
    bad["noise"] = bad["noise"].clone()
    bad["noise"][2] = 0.0  # log 0: the start of chain 2 is not finite
    with pytest.raises(FloatingPointError, match=r"chain 2.*\['noise'\]"):
        first(bad)


def test_shared_start_spreads_and_adapts() -> None:
    """All chains at one point (nothing added): the pooled mass estimate still finds the
    variances, since the chains spread during the initial buffer."""
    sd = np.array([0.1, 1.0, 10.0])
    pot = GaussianPotential(np.diag(sd**2))
    res = run_chees(
        pot,
        seed=3,
        warmup=300,
        draws=50,
        chains=32,
        init={"theta": torch.zeros(3, dtype=torch.float64)},
    )
    assert res.init == "shared"
    np.testing.assert_allclose(res.adapted.inverse_mass_matrix / sd**2, 1.0, rtol=0.3)
    assert res.flat[:, -1].std(0).min() > 0


@pytest.mark.parametrize("adapt", [True, False])
def test_adaptation_on_a_badly_scaled_gaussian(adapt: bool) -> None:
    """Scales 0.1 to 10. With the mass matrix adapted the inverse mass is the variances, and
    in the metric's coordinates the target is N(0, I): x(t) = x cos t + p sin t, so
    ChEES(t) = D sin^2 t and the jittered criterion E_u[D sin^2(u T)] = D (1/2 - sin 2T / 4T)
    is maximal where tan 2T = 2T: T* = 2.25 (steps near 1 and n = ceil(u T / eps) lengthen
    the trajectories actually run, so the adapted T is a little shorter: 1.6 to 2.0 measured).
    With the identity ChEES is dominated by the sd-10 coordinate, whose period is 10 times
    longer: T* = 22.5.
    """
    sd = np.array([0.1, 0.3, 1.0, 3.0, 10.0])
    pot = GaussianPotential(np.diag(sd**2))
    res = run_chees(pot, seed=0, warmup=400, draws=20, chains=64, adapt_mass_matrix=adapt)
    s = res.adapted
    minv, eps = s.inverse_mass_matrix, float(s.step_size[0])
    if adapt:
        np.testing.assert_allclose(minv / sd**2, 1.0, rtol=0.15)
        assert 1.0 < s.trajectory_length < 3.5
        assert 0.4 < eps < 1.6
    else:
        np.testing.assert_array_equal(minv, 1.0)
        assert 15.0 < s.trajectory_length < 35.0
        assert eps < 0.2  # the stability limit 2 * 0.1 of the narrowest scale
    assert s.trajectory_length <= 1024 * eps
    assert res.divergences == 0


def test_adaptation_functions() -> None:
    ad = chees_adaptation(max_leapfrog=10)
    st = ad.init(0.1)
    assert math.exp(st.log_trajectory_length) == pytest.approx(0.1)  # T starts at eps
    for _ in range(400):  # on target: eps = exp(mu) = 10 eps0; the criterion always grows
        st = ad.update(st, 0.651, 1.0)
    eps, t = ad.final(st)
    assert eps == pytest.approx(1.0) and t == pytest.approx(10.0)  # capped at L eps
    st = ad.restart(st, 0.05)
    assert st.da_step == 0 and st.adam_step == 0
    assert ad.final(st) == pytest.approx((0.05, 0.5))  # T capped again at the new eps
    # but the iterate is capped at L times 10 eps (what dual averaging starts towards), not
    # at L eps: a searched or dual-averaging step size far below the final one does not cut T
    assert math.exp(st.log_trajectory_length) == pytest.approx(5.0)
    for _ in range(5):  # acceptance 0: the iterate falls below 0.05, where L eps < 0.5
        st = ad.update(st, 0.0, 0.0)
    assert math.exp(st.log_step_size) < 0.05
    assert math.exp(st.log_trajectory_length) == pytest.approx(5.0)
    for _ in range(200):  # acceptance 0: the step size shrinks
        st = ad.update(st, 0.0, math.nan)  # a NaN gradient is skipped
    assert ad.final(st)[0] < 1e-5 and st.adam_step == 0


def test_argument_checks() -> None:
    pot = _net(torch.float32)
    for kw in (
        dict(draws=0),
        dict(chains=0),
        dict(target_accept=1.0),
        dict(keep=0),
        dict(max_leapfrog=0),
        dict(step_size=-1.0),
    ):
        args = dict(seed=0, warmup=2, draws=2, chains=2) | kw
        with pytest.raises(ValueError):
            run_chees(pot, **args)
    with pytest.raises(ValueError, match="n_steps"):
        z = torch.zeros(1, pot.dim)
        u, g = pot.value_and_grad_batch(z)
        chees_transition(pot, z, u, g, 0.1, torch.ones(pot.dim), 0, z, torch.zeros(1))


def test_result_layout() -> None:
    pot = _net(torch.float32)
    res = run_chees(pot, seed=0, warmup=40, draws=6, chains=3, max_leapfrog=16)
    s = res.adapted
    assert set(res.sample_stats) == set(STATS)
    assert res.draws["noise"].shape == (3, 6) and (res.draws["noise"] > 0).all()
    assert res.draws["layer0.weight"].shape == (3, 6, 4, 3)
    assert s.inverse_mass_matrix.shape == (pot.dim,) and s.step_size.shape == (3,)
    assert 1 <= res.n_steps_mean <= 16 and res.init == "prior"
    np.testing.assert_array_equal(res.sample_stats["step_size"], s.step_size[0])
    assert (res.sample_stats["n_steps"] == res.sample_stats["n_steps"][0]).all()  # shared
    assert res.warmup_seconds <= res.seconds


def test_few_chains_do_not_bias_the_trajectory_length() -> None:
    """Eight chains started from the target (D = 100, scales 0.1 to 10, the metric adapted):
    in the metric's coordinates the target is N(0, I), whose jittered ChEES optimum is
    T* = 2.25 (tan 2T = 2T; the discretized run settles a little shorter). Measured at 2 to
    256 chains: 1.6 to 2.3 with no trend in C (run_chees's docstring); a downward bias of
    the log T update at small C would end far below the band."""
    sd = np.logspace(-1, 1, 100)
    pot = GaussianPotential(np.diag(sd**2))
    z0 = torch.from_numpy(np.random.default_rng(0).standard_normal((8, 100)) * sd)
    res = run_chees(pot, seed=0, warmup=400, draws=20, chains=8, init={"theta": z0})
    assert 1.4 < res.adapted.trajectory_length < 2.8


def test_adam_restarts_once_dual_averaging_settles() -> None:
    """A huge first gradient (start-up) fills Adam's second moment and freezes log T; with
    ``adam_restart=k`` the moments restart at dual-averaging iteration k, after which each
    update moves log T by the learning rate (a gradient of constant sign is normalized to
    1). The restart comes again after ``restart`` (a new mass matrix), counted from it."""

    def grow(adam_restart: int | None) -> tuple[float, list[int]]:
        ad = chees_adaptation(max_leapfrog=10**6, adam_restart=adam_restart)
        st, steps = ad.init(0.1), []
        for phase in range(2):  # a start, then a restart
            if phase:
                st = ad.restart(st, 0.1)
            lt0 = st.log_trajectory_length
            st = ad.update(st, 0.651, 1e4)  # the first update moves by the full rate
            for _ in range(39):  # dual-averaging iterations 2 to 40
                st = ad.update(st, 0.651, 1e-3)
                steps.append(st.adam_step)
        return st.log_trajectory_length - lt0, steps

    frozen, steps = grow(None)
    assert steps[38] == 40 and frozen == pytest.approx(LEARNING_RATE, abs=1e-4)
    moved, steps = grow(30)
    assert steps[27] == 29 and steps[28] == 1 and steps[38] == 11  # restarted at iteration 30
    assert steps[39 + 27] == 29 and steps[39 + 28] == 1  # and again, counted from restart()
    assert moved == pytest.approx(12 * LEARNING_RATE, abs=1e-4)  # 1 + 11 updates at full rate
