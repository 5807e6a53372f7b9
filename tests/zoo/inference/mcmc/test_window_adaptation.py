"""The batched pure warm-up adaptation against Pyro's per-chain WarmupAdapter, bit for bit.

:func:`zoo.inference.mcmc.window_adaptation.window_adaptation` keeps its shared counters and
coefficients as Python numbers and its per-chain quantities as float64 (dual averaging) or
draw-dtype (Welford) tensors, so each chain's step size and inverse mass matrix must equal,
at every warm-up iteration, those of a ``WarmupAdapter`` configured as
``zoo.inference.mcmc.sequential._Chain`` configures it, fed with that chain's draws and
acceptance statistics. The step-size search is stubbed on both sides (the same function of
the chain, the call and the current step size); the batched search itself is compared with
the one-chain search of the driver on a Gaussian posterior.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from pyro.infer.mcmc.adaptation import WarmupAdapter

from zoo.inference.mcmc.batched import BatchMetric, leapfrog_batch
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.sequential import _Chain
from zoo.inference.mcmc.step_size import find_reasonable_step_size
from zoo.inference.mcmc.window_adaptation import (
    AdaptationState,
    Window,
    build_schedule,
    window_adaptation,
)
from zoo.models.likelihoods import GaussianLikelihood
from zoo.models.mlp import BayesianMLP

KEY = ("z",)


def test_schedule_is_pyros() -> None:
    ad = WarmupAdapter(1.0, adapt_step_size=True, adapt_mass_matrix=True)
    for warmup in range(0, 2500):
        ad._warmup_steps = warmup
        ours = build_schedule(warmup)
        pyros = [tuple(w) for w in ad._build_adaptation_schedule()]
        assert [(w.start, w.end) for w in ours] == pyros, warmup
        assert ours[-1].kind == "final"
        assert all(w.kind == "slow" for w in ours[1:-1])
        if len(ours) > 1:
            assert ours[0].kind == "initial"
            assert all(b.start == a.end + 1 for a, b in zip(ours, ours[1:], strict=False))


def test_schedule_examples() -> None:
    assert build_schedule(10) == (Window(0, 9, "final"),)
    assert build_schedule(30) == (
        Window(0, 3, "initial"),
        Window(4, 26, "slow"),
        Window(27, 29, "final"),
    )
    assert build_schedule(300) == (
        Window(0, 74, "initial"),
        Window(75, 99, "slow"),
        Window(100, 149, "slow"),
        Window(150, 249, "slow"),
        Window(250, 299, "final"),
    )


class _Stub:
    """The step-size search of chain ``c``: a fixed value, or a power of two times the current
    step size that depends on the chain and the call (like the real doubling/halving)."""

    def __init__(self, kind: str, c: int) -> None:
        self.kind, self.c, self.calls = kind, c, 0

    def __call__(self, eps: float) -> float:
        self.calls += 1
        if self.kind == "fixed":
            return 0.1 * (self.c + 1)
        return eps * 2.0 ** ((self.c + self.calls) % 5 - 2)


def _pyro_adapter(warmup, target, adapt_mm, dim, dtype, step_size, stub) -> WarmupAdapter:
    """A WarmupAdapter configured as ``_Chain.__init__`` configures it (diagonal mass)."""
    ad = WarmupAdapter(
        step_size or 1.0,
        adapt_step_size=True,
        target_accept_prob=target,
        adapt_mass_matrix=adapt_mm,
    )
    skip = [step_size is not None]  # _Chain.skip_search: the user's step size as given

    def find(_z):
        if skip[0]:
            skip[0] = False
            return ad.step_size
        return stub(ad.step_size)

    ad.configure(
        warmup,
        initial_step_size=step_size or 1.0,
        mass_matrix_shape={KEY: (dim,)},
        find_reasonable_step_size_fn=find,
        options={"dtype": dtype, "device": "cpu"},
    )
    return ad


def _sequences(warmup: int, chains: int, dim: int, dtype, seed: int):
    """Random-walk draws with per-coordinate scales, acceptance statistics in [0, 1] (float32
    as the drivers hand them over) with exact zeros and ones."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(chains, dim, generator=gen, dtype=torch.float64))
    steps = torch.randn(max(warmup, 1), chains, dim, generator=gen, dtype=torch.float64)
    z = (0.3 * scale * steps).cumsum(0).to(dtype) + 1.0
    acc = torch.rand(max(warmup, 1), chains, generator=gen)
    acc = torch.where(acc < 0.05, 0.0, torch.where(acc > 0.93, 1.0, acc)).to(torch.float32)
    return z, acc


_CONFIGS = {  # dtype, adapt_mass_matrix, stub, initial step size, target
    "f32-mass-scaled": (torch.float32, True, "scaled", None, 0.8),
    "f64-mass-fixed-given": (torch.float64, True, "fixed", 0.05, 0.9),
    "f32-nomass-scaled-given": (torch.float32, False, "scaled", 0.05, 0.65),
}


@pytest.mark.parametrize("config", list(_CONFIGS))
@pytest.mark.parametrize("chains", [1, 5, 16])  # 16: torch.exp would be vectorized (SLEEF)
@pytest.mark.parametrize("warmup", [0, 1, 10, 19, 20, 30, 150, 151, 300, 1000])
def test_batched_adaptation_is_pyros_warmup_adapter(warmup: int, chains: int, config: str) -> None:
    dtype, adapt_mm, stub_kind, step_size, target = _CONFIGS[config]
    dim = 7
    z, acc = _sequences(warmup, chains, dim, dtype, seed=warmup + 13 * chains)
    z0 = torch.zeros(chains, dim, dtype=dtype)
    stubs = [_Stub(stub_kind, c) for c in range(chains)]
    pyro_ad = [
        _pyro_adapter(warmup, target, adapt_mm, dim, dtype, step_size, stubs[c])
        for c in range(chains)
    ]
    ours_stubs = [_Stub(stub_kind, c) for c in range(chains)]
    ad = window_adaptation(warmup, target_accept=target, adapt_mass_matrix=adapt_mm)

    def search(state: AdaptationState) -> AdaptationState:
        eps = [ours_stubs[c](e) for c, e in enumerate(state.step_size.tolist())]
        return ad.restart(state, torch.tensor(eps, dtype=torch.float64))

    def check(state: AdaptationState, t) -> None:
        for c, pa in enumerate(pyro_ad):
            assert state.step_size[c].item() == pa.step_size, (t, c)
            minv = pa.mass_matrix_adapter.inverse_mass_matrix[KEY]
            assert state.inverse_mass_matrix[c].dtype == minv.dtype
            assert torch.equal(state.inverse_mass_matrix[c], minv), (t, c)
            da = pa._step_size_adapt_scheme
            assert state.log_step_size_avg[c].item() == da._x_avg, (t, c)
            assert state.gradient_avg[c].item() == da._g_avg, (t, c)
            assert state.da_step == da._t

    state = ad.init(z0, 1.0 if step_size is None else step_size, search=step_size is None)
    for c, pa in enumerate(pyro_ad):
        pa.reset_step_size_adaptation({"z": z0[c]})
    if state.needs_search:
        state = search(state)
    else:
        state = ad.restart(state, state.step_size)
    check(state, "start")
    searches = 0
    for t in range(warmup):
        for c, pa in enumerate(pyro_ad):
            pa.step(t, {"z": z[t, c]}, acc[t, c])
        state = ad.update(state, t, z[t], acc[t])
        if state.needs_search:
            searches += 1
            state = search(state)
        check(state, t)
    assert state.window == len(ad.schedule) or warmup == 0
    n_slow = sum(w.kind == "slow" for w in ad.schedule)
    assert searches == (n_slow if adapt_mm else 0)
    assert [s.calls for s in ours_stubs] == [s.calls for s in stubs]
    step, minv = ad.final(state)
    assert step.shape == (chains,) and minv.shape == (chains, dim)
    if warmup >= 20 and adapt_mm:  # the mass matrix moved away from the identity
        assert not torch.equal(minv, torch.ones_like(minv))
    # past warm-up update is a no-op, as WarmupAdapter.step
    assert ad.update(state, warmup, z[0], acc[0]) is state


def test_update_is_pure_and_batched_shapes() -> None:
    ad = window_adaptation(40)
    z = torch.randn(3, 4)
    s0 = ad.init(z, 0.5)
    assert s0.needs_search and s0.step_size.dtype == torch.float64
    s0 = ad.restart(s0, torch.tensor([0.5, 0.25, 1.0], dtype=torch.float64))
    snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in s0]
    s1 = ad.update(s0, 0, z, torch.tensor([0.9, 0.5, 0.1]))
    for a, b in zip(s0, snapshot, strict=True):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    # higher acceptance than the target -> larger step than mu allows for lower acceptance
    assert s1.step_size[0] > s1.step_size[2] / 2
    with pytest.raises(ValueError, match="chains"):
        ad.init(z[0])


# --- the batched step-size search against the one-chain search ----------------------------
def _gaussian(dtype) -> FlatPotential:
    """Bayesian linear regression with known noise: a Gaussian posterior in 4 dimensions."""
    gen = torch.Generator().manual_seed(0)
    f64 = torch.float64
    x = torch.randn(40, 3, generator=gen, dtype=f64) * torch.tensor([1.0, 3.0, 0.2], dtype=f64)
    y = x @ torch.tensor([0.5, -1.0, 2.0], dtype=f64) + 0.3 * torch.randn(
        40, generator=gen, dtype=f64
    )
    return FlatPotential(BayesianMLP(3, [], GaussianLikelihood(0.3)), x.to(dtype), y.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_search_is_the_one_chain_search(dtype) -> None:
    pot = _gaussian(dtype)
    starts = [1e-4, 1.0, 50.0, 1e-11, 0.3, 3.0]
    c = len(starts)
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(c, pot.dim, generator=gen, dtype=dtype)
    minv = (torch.rand(c, pot.dim, generator=gen, dtype=dtype) + 0.1) * 0.05
    minv[4] = 1.0
    chains = [_Chain(pot, None, 11, i, 100, 0.8, None, "diag", True) for i in range(c)]
    gens = []
    for i, ch in enumerate(chains):
        g = torch.Generator()
        g.set_state(ch.gen.get_state())
        gens.append(g)
        ch.adapter.mass_matrix_adapter.inverse_mass_matrix = {
            tuple(pot.site_slices): minv[i].clone()
        }
        ch.adapter.step_size = starts[i]
    expected = [ch.find_step_size(ch.zdict(z[i])) for i, ch in enumerate(chains)]
    leap = functools.partial(leapfrog_batch, pot, BatchMetric(minv))
    got = find_reasonable_step_size(
        pot.value_and_grad_batch, leap, z, torch.tensor(starts, dtype=torch.float64), minv, gens
    )
    assert got.dtype == torch.float64
    assert got.tolist() == expected
    for g, ch in zip(gens, chains, strict=True):  # the same number of momenta drawn
        assert torch.equal(g.get_state(), ch.gen.get_state())
    # the searches went both ways and several rounds
    ratios = [e / s for e, s in zip(expected, starts, strict=True)]
    assert max(ratios) >= 8 and min(ratios) <= 1 / 8 and expected[3] == 1e-10


def test_search_masks_inactive_chains() -> None:
    pot = _gaussian(torch.float32)
    z = torch.zeros(3, pot.dim)
    minv = torch.ones(3, pot.dim)
    gens = [torch.Generator().manual_seed(i) for i in range(3)]
    before = [g.get_state() for g in gens]
    leap = functools.partial(leapfrog_batch, pot, BatchMetric(minv))
    start = torch.tensor([1e-3, 1e-3, 1e-3], dtype=torch.float64)
    got = find_reasonable_step_size(
        pot.value_and_grad_batch,
        leap,
        z,
        start,
        minv,
        gens,
        active=torch.tensor([True, False, True]),
    )
    assert got[1] == 1e-3 and got[0] > 1e-3
    assert torch.equal(gens[1].get_state(), before[1])
    assert not torch.equal(gens[0].get_state(), before[0])
    assert np.isfinite(got.numpy()).all()
