"""The floor on batched NUTS's, HMC's and ChEES's trajectories (``min_trajectory``), and a
pooled metric's run resumed from a checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_checkpoint import _stopped_then_resumed
from tests.zoo.inference.mcmc.test_metrics import D, _check_draws
from zoo.inference.mcmc import GaussianPotential
from zoo.inference.mcmc.batched import BatchMetric
from zoo.inference.mcmc.loop import sample
from zoo.inference.mcmc.metrics import DenseBatchMetric
from zoo.inference.mcmc.programs import BATCHED
from zoo.inference.mcmc.samplers import run_chees
from zoo.inference.mcmc.trajectory_floor import floor_time, min_leapfrog_steps, min_tree_depth
from zoo.inference.mcmc.windowed import WindowedProgram

COV = np.diag(np.linspace(0.5, 2.0, D))


def _nuts(min_trajectory, pooled=None, seed=5, warmup=150, draws=200, checkpoint=None):
    kernel = BATCHED["nuts"](8, min_trajectory)
    program = WindowedProgram(
        kernel.transition,
        "nuts",
        trajectory_cap=kernel.trajectory_cap,
        seed=seed,
        warmup=warmup,
        target_accept=0.8,
        step_size=None,
        adapt_mass_matrix=True,
        pooled=pooled,
    )
    pot = GaussianPotential(COV)
    kw = dict(warmup=warmup, draws=draws, chains=4, target_accept=0.8, checkpoint=checkpoint)
    return sample(program, pot, **kw)


def test_nuts_builds_every_tree_to_the_floor_and_still_samples_the_gaussian() -> None:
    free = _nuts(None)
    time = 6.0
    floored = _nuts(time)
    eps = floored.adapted.step_size  # (C,): the post-warm-up step sizes
    want = min_tree_depth(torch.full((4,), time, dtype=torch.float64), torch.from_numpy(eps), 8)
    depth = floored.sample_stats["tree_depth"]  # (C, S)
    assert want.min() >= 3 and np.mean(free.sample_stats["tree_depth"]) < want.min()
    ok = (depth >= want.numpy()[:, None]) | floored.sample_stats["diverging"]
    assert ok.all(), (depth.min(1), want)
    steps = floored.sample_stats["n_steps"]
    assert (steps >= 2 ** want.numpy()[:, None] - 1).all()
    assert (steps * eps[:, None] >= time).all()  # the floor's time, reached
    # the facts the fit records
    assert floored.trajectory_cap == 8
    assert floored.saturated == int(np.count_nonzero(depth >= 8))
    assert floored.n_steps_mean > 2 * free.n_steps_mean
    _check_draws(floored.flat, COV)


def test_hmc_takes_at_least_the_floors_steps() -> None:
    # T = 2 (between a quarter and a half of the whitened target's period 2 pi: a fixed
    # length near a whole period would leave the chains nearly periodic)
    kernel = BATCHED["hmc"](1, 2.0)
    program = WindowedProgram(
        kernel.transition,
        "hmc",
        trajectory_cap=None,
        seed=1,
        warmup=100,
        target_accept=0.8,
        step_size=None,
        adapt_mass_matrix=True,
    )
    res = sample(
        program, GaussianPotential(COV), warmup=100, draws=150, chains=4, target_accept=0.8
    )
    eps = res.adapted.step_size
    want = min_leapfrog_steps(torch.full((4,), 2.0, dtype=torch.float64), torch.from_numpy(eps))
    assert want > 1 and (res.sample_stats["n_steps"] == want).all()
    _check_draws(res.flat, COV)


class _Prior:
    def prior_scale(self) -> float:
        return 1.5


def test_the_prior_floor_is_izmailovs_length_in_the_metrics_widest_coordinate() -> None:
    minv = torch.tensor([[1.0, 4.0, 0.5], [0.25, 1.0, 1.0]], dtype=torch.float64)
    t = floor_time("prior", _Prior(), BatchMetric(minv), 2)
    want = torch.tensor([math.pi / 2 * 1.5 / 2, math.pi / 2 * 1.5], dtype=torch.float64)
    assert torch.allclose(t, want)
    dense = DenseBatchMetric(torch.tensor([[9.0, 1.0], [1.0, 2.0]], dtype=torch.float64))
    t = floor_time("prior", _Prior(), dense, 3)
    assert torch.allclose(t, torch.full((3,), math.pi / 2 * 1.5 / 3, dtype=torch.float64))
    assert torch.equal(floor_time(2.5, _Prior(), dense, 2), torch.full((2,), 2.5).double())
    # (2^d - 1) eps >= T: T / eps = 3 -> d = 2, 3.01 -> 3; capped at max_depth
    eps = torch.tensor([1.0, 1.0, 0.001], dtype=torch.float64)
    t = torch.tensor([3.0, 3.01, 1000.0], dtype=torch.float64)
    assert min_tree_depth(t, eps, 6).tolist() == [2, 3, 6]


@pytest.mark.parametrize("stop_after", [60, 170])  # in the last slow window; drawing
def test_a_pooled_metrics_run_resumes_bitwise(stop_after: int) -> None:
    def run(channel):
        return _nuts(None, "dense", warmup=150, draws=30, checkpoint=channel)

    plain = run(None)
    resumed, said = _stopped_then_resumed(run, stop_after)
    assert len(said) == 1 and "resumed" in said[0]
    np.testing.assert_array_equal(plain.flat, resumed.flat)
    np.testing.assert_array_equal(plain.adapted.step_size, resumed.adapted.step_size)


def test_chees_takes_at_least_the_floors_steps_and_samples_the_gaussian() -> None:
    kw = dict(seed=2, warmup=100, draws=150, chains=16, max_leapfrog=64)
    free = run_chees(GaussianPotential(COV), **kw)
    floored = run_chees(GaussianPotential(COV), min_trajectory=4.0, **kw)
    eps = float(floored.adapted.step_size[0])
    want = math.ceil(4.0 / eps)
    steps = floored.sample_stats["n_steps"]
    assert want > 1 and (steps >= want).all() and (steps * eps >= 4.0).all()
    assert free.sample_stats["n_steps"].min() < want  # the jitter alone goes below it
    _check_draws(floored.flat, COV)
